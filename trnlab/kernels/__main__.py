"""`python -m trnlab.kernels [--target trn2] [--batch 4 --seq 128 --d-model 128 --heads 4 --vocab 64]`:
the simulated time of every kernel at tiny-GPT sizes (timing-only mode)."""
from __future__ import annotations

import argparse

from trnlab.kernels.workload import simulate


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trnlab.kernels", description=__doc__)
    parser.add_argument("--target", default="trn2")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args(argv)
    times = simulate(args.target, batch=args.batch, seq=args.seq, d_model=args.d_model, n_head=args.heads,
                     vocab=args.vocab, dtype=args.dtype)
    print(f"{args.target}: batch {args.batch}, seq {args.seq}, d_model {args.d_model}, {args.heads} heads, "
          f"vocab {args.vocab}, {args.dtype}")
    print(f"{'kernel':28s}{'simulated us':>14s}{'instructions':>14s}  {'busiest engine':18s}{'wall s':>8s}")
    for t in times:
        print(f"{t.name:28s}{t.latency_us:14.2f}{t.instructions:14d}  {t.bottleneck:18s}{t.wall_s:8.2f}")


if __name__ == "__main__":
    main()
