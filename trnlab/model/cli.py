"""`python -m trnlab train ...` and `python -m trnlab ask "PROMPT"`.

    python -m trnlab ask "407+38"                       # → 445, from the committed checkpoint
    python -m trnlab ask "reverse kite" --temperature 0.8 --seed 1
    python -m trnlab train --out data/checkpoint        # the committed recipe: rewrites the checkpoint
    python -m trnlab train --steps 300 --out /tmp/ckpt  # a quick run
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from trnlab.data.tokenizer import UnknownCharacterError
from trnlab.model.checkpoint import DEFAULT_CHECKPOINT


def train_main(argv: list[str]) -> int:
    from trnlab.model.train import TrainConfig, train

    parser = argparse.ArgumentParser(prog="python -m trnlab train", description="Train the tiny GPT from scratch on the CPU.")
    parser.add_argument("--out", type=Path, required=True,
                        help="checkpoint directory to write (data/checkpoint replaces the committed checkpoint)")
    parser.add_argument("--no-test", action="store_true", help="skip the test-split accuracy at the end")
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=value, metavar="BOOL")
        else:
            parser.add_argument(flag, type=type(value), default=value)
    args = parser.parse_args(argv)
    config = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    result = train(config, out_dir=args.out, evaluate_test=not args.no_test)
    print(f"{result.model.num_params():,} parameters, {config.steps} steps in {result.seconds:.1f} s")
    print(f"final train loss {result.train_loss[-1]:.4f}, val loss {result.val_loss[-1]:.4f}")
    for task, accuracy in result.test_accuracy.items():
        print(f"test exact match  {task:8s} {100 * accuracy:5.1f} %")
    print(f"checkpoint written to {args.out}")
    return 0


def ask_main(argv: list[str]) -> int:
    from trnlab.model.checkpoint import load_checkpoint
    from trnlab.model.generate import PromptTooLongError, ask

    parser = argparse.ArgumentParser(prog="python -m trnlab ask", description="Ask the trained tiny GPT a question.")
    parser.add_argument("prompt", help='e.g. "407+38", "512-87", "reverse kite", "sort 52819"')
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None, help="seed for sampling")
    args = parser.parse_args(argv)
    try:
        model, tokenizer = load_checkpoint(args.checkpoint)
        print(ask(model, tokenizer, args.prompt, args.temperature, args.top_k, args.seed))
    except (UnknownCharacterError, PromptTooLongError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
