"""`python -m trnlab.data` — regenerate the corpus in ``data/corpus/`` (byte-for-byte the same)."""

from __future__ import annotations

import sys

from trnlab.data.corpus import CORPUS_DIR, write_corpus


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    directory = argv[0] if argv else CORPUS_DIR
    for split, path in write_corpus(directory).items():
        lines = path.read_text(encoding="utf-8").count("\n") - 1
        print(f"{split:5s} {lines:6d} examples  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
