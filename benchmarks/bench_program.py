"""Benchmark: the program layer — tracing a kernel into a program, and replaying it.

The tiled NKI matmul (`trnlab.kernels.matmul_ladder.matmul_tiled`, AWS's tutorial structure) at
n x n x n, bf16, timing-only on the Trn2 preset:

- trace: `nki.trace` — the kernel's Python runs once, every instruction is checked and recorded,
  then tiles are allocated by liveness;
- replay: `Device.run` of the traced program — no Python tracing, one core method per instruction.

Printed per phase: instructions, CPU seconds (`time.process_time`, so a busy machine's other jobs do
not count) and instructions per CPU second, with the issue's targets (trace >= 200,000/s, replay
>= 500,000/s) and the ratio replay/trace measured in the same run.

    python benchmarks/bench_program.py             # n = 8192 (about 200,000 instructions)
    python benchmarks/bench_program.py --n 2048    # a quick run
"""
from __future__ import annotations

import argparse
import time

import trnlab.nki as nki
from trnlab.hardware.device import Device
from trnlab.kernels import matmul_ladder as ladder


def measure(n: int) -> dict:
    lhsT, rhs = nki.ShapeDtype((n, n), "bfloat16"), nki.ShapeDtype((n, n), "bfloat16")
    cpu = time.process_time()
    program = nki.trace(ladder.matmul_tiled, lhsT, rhs, target="trn2")
    trace_s = time.process_time() - cpu
    device = Device("trn2", mode="timing", cores=1)
    cpu = time.process_time()
    run = device.run(program, None, None)
    replay_s = time.process_time() - cpu
    return {"n": n, "instructions": len(program), "trace_s": trace_s, "replay_s": replay_s,
            "simulated_ms": run.latency_ns / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    args = parser.parse_args()
    r = measure(args.n)
    k = r["instructions"]
    trace_rate, replay_rate = k / r["trace_s"], k / r["replay_s"]
    print(f"matmul_tiled {r['n']}^3 bf16 on Trn2, timing-only: {k:,} instructions, "
          f"simulated {r['simulated_ms']:.2f} ms")
    print(f"  trace   {r['trace_s']:7.2f} CPU s  {trace_rate:10,.0f} instructions/CPU s  (target >= 200,000)")
    print(f"  replay  {r['replay_s']:7.2f} CPU s  {replay_rate:10,.0f} instructions/CPU s  (target >= 500,000)")
    print(f"  replay is {replay_rate / trace_rate:.1f}x the trace rate")


if __name__ == "__main__":
    main()
