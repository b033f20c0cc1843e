"""The command line, the top of the stack: `python -m trnlab COMMAND ...` (or the `trnlab` script).

    train   train the tiny GPT from scratch (PyTorch, CPU) and write a checkpoint
    train-sim  continue training a checkpoint on the simulated Trainium (compiled step) and save it
               with its provenance (the checkpoint notebooks 00 and 09 serve)
    ask     ask the trained model a question (on the simulated Trainium; --device cpu for PyTorch)
    serve   an OpenAI-compatible HTTP server for the model (POST /v1/completions, /v1/chat/completions)
    config  the switches and environment variables trnlab reads (trnlab.config), with their values now

Examples:

    python -m trnlab ask "407+38"                       # → 445 on the simulated trn2 (latency on stderr)
    python -m trnlab ask "407+38" --device cpu          # the plain PyTorch path, no KV cache
    python -m trnlab serve --port 8000                  # OpenAI-compatible HTTP server (trnlab.serve.http)
    python -m trnlab ask "reverse kite" --temperature 0.8 --seed 1
    python -m trnlab train --out data/checkpoint        # the committed recipe: rewrites the checkpoint
    python -m trnlab train --steps 300 --out /tmp/ckpt  # a quick run
    python -m trnlab train-sim --out data/checkpoint_trn2   # the committed fine-tune on the simulated trn2
    TRNLAB_FAST=0 python -m trnlab config               # the switch table, the fast paths off
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


def train_sim_main(argv: list[str]) -> int:
    from trnlab.training.finetune import FinetuneConfig, finetune

    parser = argparse.ArgumentParser(prog="python -m trnlab train-sim", description=(
        "Fine-tune a checkpoint on the simulated Trainium with the compiled training step and write it with "
        "its provenance (device, steps, seed, simulated time and cost, test accuracy) in train_log.json."))
    parser.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    parser.add_argument("--start", type=Path, default=DEFAULT_CHECKPOINT, help="the checkpoint to continue")
    parser.add_argument("--no-test", action="store_true", help="skip the test-split accuracy at the end")
    defaults = FinetuneConfig()
    for f in fields(FinetuneConfig):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(defaults, f.name)),
                            default=getattr(defaults, f.name))
    args = parser.parse_args(argv)
    config = FinetuneConfig(**{f.name: getattr(args, f.name) for f in fields(FinetuneConfig)})
    log = finetune(config, args.out, args.start, evaluate_test=not args.no_test,
                   on_step=lambda i, loss: print(f"step {i + 1:3d}/{config.steps}  loss {loss:.5f}", flush=True))
    print(f"{config.steps} steps on simulated {config.target}: {log['simulated_seconds'] * 1e3:.2f} ms simulated, "
          f"${log['usd']:.6f}; {log['wall_seconds']:.0f} s of wall time")
    for task, accuracy in log.get("test_accuracy", {}).items():
        print(f"test exact match  {task:8s} {100 * accuracy:5.1f} %")
    print(f"checkpoint written to {args.out}")
    return 0


def ask_main(argv: list[str]) -> int:
    from trnlab.model.checkpoint import load_checkpoint
    from trnlab.model.generate import PromptTooLongError, ask

    parser = argparse.ArgumentParser(prog="python -m trnlab ask", description=(
        "Ask the trained tiny GPT a question. By default it runs on the simulated Trainium (trn2) with a KV "
        "cache and prints the answer with its simulated latency; --device cpu keeps the plain PyTorch path."))
    parser.add_argument("prompt", help='e.g. "407+38", "512-87", "reverse kite", "sort 52819"')
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--device", choices=("trn1", "trn2", "trn3", "cpu"), default="trn2",
                        help="simulated Trainium generation (default trn2) or cpu (PyTorch, no simulated time)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling on the simulated Trainium")
    parser.add_argument("--seed", type=int, default=None, help="seed for sampling")
    args = parser.parse_args(argv)
    try:
        if args.device == "cpu":
            if args.top_p != 1.0:
                parser.error("--top-p needs a Trainium device (the PyTorch path samples with temperature and top-k)")
            model, tokenizer = load_checkpoint(args.checkpoint)
            print(ask(model, tokenizer, args.prompt, args.temperature, args.top_k, args.seed))
        else:
            from trnlab.serve.sampling import SamplingParams
            from trnlab.serve.service import ask as ask_on_device

            params = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
            answer = ask_on_device(args.prompt, args.device, params, args.checkpoint)
            print(answer.text)                              # stdout: the answer alone, for pipes and scripts
            print(answer.latency_line(), file=sys.stderr)   # stderr: its simulated latency
    except (UnknownCharacterError, PromptTooLongError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def serve_main(argv: list[str]) -> int:
    from trnlab.serve.http import main

    return main(argv)


def config_main(argv: list[str]) -> int:
    from trnlab import config

    argparse.ArgumentParser(prog="python -m trnlab config", description=(
        "Print trnlab's switches: name, environment variable, default, value now, what it does.")).parse_args(argv)
    print(config.table())
    return 0


COMMANDS = {"train": train_main, "train-sim": train_sim_main, "ask": ask_main, "serve": serve_main, "config": config_main}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip().split("\n\nExamples:")[0])
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    return int(COMMANDS[argv[0]](argv[1:]) or 0)
