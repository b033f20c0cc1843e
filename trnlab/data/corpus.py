"""Reading and writing the corpus files in ``data/corpus/`` (tab-separated, one example a line).

    task	prompt	answer
    add	407+38	445

`write_corpus` produces the same bytes for the same config, so ``python -m trnlab.data`` can
regenerate the committed files and ``git diff`` stays empty.
"""

from __future__ import annotations

from pathlib import Path

from trnlab import DATA_DIR
from trnlab.data.tasks import SPLITS, CorpusConfig, Example, make_corpus

CORPUS_DIR = DATA_DIR / "corpus"
HEADER = "task\tprompt\tanswer\n"


def format_split(examples: list[Example]) -> str:
    return HEADER + "".join(f"{e.task}\t{e.prompt}\t{e.answer}\n" for e in examples)


def write_corpus(directory: Path = CORPUS_DIR, config: CorpusConfig = CorpusConfig()) -> dict[str, Path]:
    """Generate the corpus and write ``train.tsv``, ``val.tsv``, ``test.tsv``; return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, examples in make_corpus(config).items():
        path = directory / f"{split}.tsv"
        path.write_bytes(format_split(examples).encode("utf-8"))  # bytes: no platform newline change
        paths[split] = path
    return paths


def load_split(split: str, directory: Path = CORPUS_DIR) -> list[Example]:
    """Read one split (``"train"``, ``"val"`` or ``"test"``) from the corpus directory."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; splits are {', '.join(SPLITS)}")
    path = Path(directory) / f"{split}.tsv"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; generate the corpus with `python -m trnlab.data`")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] + "\n" != HEADER:
        raise ValueError(f"{path}: first line must be the header {HEADER.strip()!r}")
    return [Example(*line.split("\t")) for line in lines[1:]]


def load_corpus(directory: Path = CORPUS_DIR) -> dict[str, list[Example]]:
    return {split: load_split(split, directory) for split in SPLITS}
