"""Notebook 05's block-size exercise on every shape its cases can draw: answers against the target.

    python benchmarks/nb05_blocks.py            # 34 shapes, bf16, timing-only (about 10 minutes)
    python benchmarks/nb05_blocks.py --quick    # the first shape of each family

For each shape the checker's reference blocks are simulated (the fastest sets the target), then each
answer below; printed: each answer's time as a % of the reference's, measured in the same run, and
how many shapes break the exercise's 120 % target. The answers: the reference solution
(`tests/solutions/nb05_sbuf_blocks.py`), three other reasoned rules, blocks capped at 8 tiles,
blocks that fill SBUF with no room to prefetch, (1, 1, 1) and AWS's (16, 2, 8).
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from trnlab.course.checks import nb05_writing_kernels as nb05
from trnlab.hardware.errors import SBUFOverflowError

CAPACITY = 224 * 1024
FAMILIES = {"big": [(m, 2, k) for m in (32, 64) for k in (16, 32)],
            "odd": [(m, n, k) for m in (9, 15, 27) for n in (1, 3) for k in (9, 15)],
            "mixed": [(m, n, k) for m in (12, 20, 24) for n in (1, 2) for k in (10, 12, 20)]}


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def rule(cap: int, key, double_buffer: bool = True):
    """Blocks (tm, 1, tk) of up to `cap` tiles that fit SBUF (with room for a second K block), best by `key`."""
    def choose(mt: int, nt: int, kt: int) -> tuple[int, int, int]:
        fits = [(tm, 1, tk) for tm in _divisors(mt, cap) for tk in _divisors(kt, cap)
                if mt * 512 * 4 + (2 if double_buffer else 1) * tk * (512 + 128 * tm) * 2 <= CAPACITY]
        return max(fits, key=lambda b: key(b[0], b[2]))
    return choose


def solution(mt: int, nt: int, kt: int) -> tuple[int, int, int]:
    namespace: dict = {}
    exec((Path(__file__).parents[1] / "tests/solutions/nb05_sbuf_blocks.py").read_text(), namespace)
    got = namespace["choose_blocks"](128 * mt, 512 * nt, 128 * kt)
    return tuple(got[k] for k in nb05.BLOCK_KEYS)


ANSWERS = {
    "reference solution (reuse tm*tk, <=16)": solution,
    "balanced (min(tm, tk), <=16)": rule(16, lambda m, k: (min(m, k), m * k)),
    "largest M block, then K (<=16)": rule(16, lambda m, k: (m, k)),
    "largest K block, then M (<=16)": rule(16, lambda m, k: (k, m)),
    "balanced, capped at 8 tiles": rule(8, lambda m, k: (min(m, k), m * k)),
    "fill SBUF, no room to prefetch": rule(32, lambda m, k: (m * k, m), double_buffer=False),
    "(1, 1, 1)": lambda *shape: (1, 1, 1),
    "AWS's (16, 2, 8)": lambda *shape: (16, 2, 8),
}


def measure(shapes) -> dict[str, list[float | None]]:
    ratios: dict[str, list[float | None]] = {name: [] for name in ANSWERS}
    for mt, nt, kt in shapes:
        M, N, K = 128 * mt, 512 * nt, 128 * kt
        reference, best = nb05.reference_run(M, N, K)
        line = [f"({mt:2d}, {nt}, {kt:2d}) tiles: reference {best} {reference.latency_us:7.1f} us"]
        for name, answer in ANSWERS.items():
            tm, tn, tk = answer(mt, nt, kt)
            if mt % tm or nt % tn or kt % tk:
                ratios[name].append(None)           # does not divide the shape
                continue
            try:
                ratio = nb05.run_blocks(M, N, K, (tm, tn, tk)).latency_us / reference.latency_us
            except SBUFOverflowError:
                ratio = None
            ratios[name].append(ratio)
        line.append("  ".join(f"{r * 100:4.0f}%" if r else " -- " for r in (ratios[n][-1] for n in ANSWERS)))
        print(*line, sep="  ", flush=True)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one shape per family")
    args = parser.parse_args()
    shapes = [family[0] for family in FAMILIES.values()] if args.quick else sum(FAMILIES.values(), [])
    ratios = measure(shapes)
    print(f"\n{'answer':42s} {'median':>7s} {'max':>7s}  shapes over {100 * nb05.TIME_TARGET:.0f}% / "
          "not dividing or overflowing")
    for name, values in ratios.items():
        ok = [v for v in values if v is not None]
        over = sum(v > nb05.TIME_TARGET for v in ok)
        median = f"{100 * statistics.median(ok):6.0f}%" if ok else "    --"
        worst = f"{100 * max(ok):6.0f}%" if ok else "    --"
        print(f"{name:42s} {median} {worst}  {over:2d} / {len(values) - len(ok):2d}   of {len(values)}")


if __name__ == "__main__":
    main()
