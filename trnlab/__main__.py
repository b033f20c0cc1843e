"""Command line: `python -m trnlab COMMAND ...`.

    train   train the tiny GPT from scratch (PyTorch, CPU) and write a checkpoint
    ask     ask the trained model a question (on the simulated Trainium; --device cpu for PyTorch)
    serve   an OpenAI-compatible HTTP server for the model (POST /v1/completions, /v1/chat/completions)
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"train": "trnlab.model.cli:train_main", "ask": "trnlab.model.cli:ask_main",
                "serve": "trnlab.model.cli:serve_main"}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print(__doc__.strip())
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module_name, func_name = commands[argv[0]].split(":")
    import importlib

    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
