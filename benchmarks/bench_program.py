"""Benchmark: the program layer — tracing a kernel into a program, and replaying it.

The tiled NKI matmul (`trnlab.kernels.matmul_ladder.matmul_tiled`, AWS's tutorial structure) at
n x n x n, bf16, timing-only on the Trn2 preset:

- trace: `nki.trace` — the kernel's Python runs once, every instruction is checked and recorded,
  then tiles are allocated by liveness; its affine loops are traced in iterations 0, 1 and n-1
  and stamped in between (`trnlab/nki/loops.py`);
- concrete trace: the same with every iteration traced (`config.override(fast=False)`), the baseline;
- first replay: `Device.run` of the traced program on a fresh core — no Python tracing; it resolves
  the program once into its flat form (`trnlab/hardware/replay_timing.py`), then runs it;
- checked replay: every instruction issued to a fresh core again, rules and all (the baseline);
- replay: further launches on the same core (the second resolves once more for the bytes the first
  left freed; from the third on nothing is resolved): the median of `--replays` launches after two.

Printed per phase: instructions, CPU seconds (`time.process_time`, so a busy machine's other jobs do
not count) and instructions per CPU second, with the issue's targets (trace >= 200,000/s, replay
>= 500,000/s) and the ratio replay/trace measured in the same run.

    python benchmarks/bench_program.py             # n = 8192 (about 200,000 instructions)
    python benchmarks/bench_program.py --n 2048    # a quick run
    python benchmarks/bench_program.py --schedules # program order vs the list schedule on the ladder
"""
from __future__ import annotations

import argparse
import statistics
import time

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware.device import Device
from trnlab.hardware.replay import execute
from trnlab.kernels import matmul_ladder as ladder


def measure(n: int, replays: int = 3, concrete: bool = True) -> dict:
    lhsT, rhs = nki.ShapeDtype((n, n), "bfloat16"), nki.ShapeDtype((n, n), "bfloat16")
    concrete_s = None
    if concrete:
        # the baseline: every loop iteration traced (the fast paths off, trnlab/nki/loops.py)
        with config.override(fast=False):
            cpu = time.process_time()
            reference = nki.trace(ladder.matmul_tiled, lhsT, rhs, target="trn2")
            concrete_s = time.process_time() - cpu
        nki._PROGRAMS.clear()
        del reference
    cpu = time.process_time()
    program = nki.trace(ladder.matmul_tiled, lhsT, rhs, target="trn2")
    trace_s = time.process_time() - cpu
    device = Device("trn2", mode="timing", cores=1)
    launches = []
    for _ in range(2 + replays):
        cpu = time.process_time()
        run = device.run(program, None, None)
        launches.append(time.process_time() - cpu)
    # the checked replay (every instruction issued to the core again, rules and all) as the baseline
    core = Device("trn2", mode="timing", cores=1).cores[0]
    cpu = time.process_time()
    execute(program, core, [None, None], checked=True)
    checked_s = time.process_time() - cpu
    return {"n": n, "instructions": len(program), "trace_s": trace_s, "concrete_s": concrete_s,
            "first_s": launches[0],
            "replay_s": statistics.median(launches[2:]), "checked_s": checked_s,
            "simulated_ms": run.latency_ns / 1e6}


def compare_schedules(M: int = 4096, N: int = 2048, K: int = 4096) -> None:
    """Ladder steps 2-5 (fp32) under both schedules, next to AWS's engine-active profile (Trn2)."""
    from trnlab.hardware import presets
    from trnlab.hardware.errors import HardwareError
    from trnlab.hardware.instruction_order import SCHEDULES, scheduled
    print(f"ladder at M={M} N={N} K={K} fp32, Trn2, timing-only; AWS's profile is at M=4096 N=8192 K=8192")
    for kernel in ladder.LADDER[1:]:
        spec = presets.TRN2.core
        if kernel is ladder.matmul_block_free:
            spec = ladder.roomy_trn2(max(spec.sbuf_partition_bytes, ladder.block_free_sbuf_bytes(K)))
        default, nki.SCHEDULE = nki.SCHEDULE, "program"      # trace in program order, then schedule
        try:
            program = nki.trace(kernel, nki.ShapeDtype((K, M), "float32"), nki.ShapeDtype((K, N), "float32"),
                                target=spec)
        finally:
            nki.SCHEDULE = default
        aws = ladder.AWS_TRN2_ACTIVE.get(kernel.__name__, {})
        for name in SCHEDULES:
            try:
                cpu = time.process_time()
                p = scheduled(program, name)
                cpu = time.process_time() - cpu
            except HardwareError as error:
                print(f"  {kernel.__name__:22s} {name:8s} refused: {str(error).splitlines()[0][:70]}")
                continue
            run = Device(spec, mode="timing", cores=1).run(p, None, None)
            active = run.profile(dtype="float32").active
            print(f"  {kernel.__name__:22s} {name:8s} {run.latency_us:9.1f} us   TensorE {100 * active.get('pe', 0):5.1f} % "
                  f"(AWS {aws.get('pe', float('nan')):5.1f})   DMA {100 * active.get('dma (any queue)', 0):5.1f} % "
                  f"(AWS {aws.get('dma', float('nan')):5.1f})   scheduled in {cpu:.2f} CPU s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--replays", type=int, default=3, help="launches timed after the first two")
    parser.add_argument("--schedules", action="store_true", help="compare the two schedules on the ladder")
    parser.add_argument("--no-concrete", action="store_true", help="skip the concrete-trace baseline")
    args = parser.parse_args()
    if args.schedules:
        compare_schedules()
        return
    r = measure(args.n, args.replays, concrete=not args.no_concrete)
    k = r["instructions"]
    trace_rate, first_rate, replay_rate = k / r["trace_s"], k / r["first_s"], k / r["replay_s"]
    print(f"matmul_tiled {r['n']}^3 bf16 on Trn2, timing-only: {k:,} instructions, "
          f"simulated {r['simulated_ms']:.2f} ms")
    print(f"  {'trace':15s}{r['trace_s']:7.2f} CPU s  {trace_rate:10,.0f} instructions/CPU s  (target >= 200,000; "
          f"loops stamped)")
    if r["concrete_s"] is not None:
        concrete_rate = k / r["concrete_s"]
        print(f"  {'concrete trace':15s}{r['concrete_s']:7.2f} CPU s  {concrete_rate:10,.0f} instructions/CPU s  "
              f"(every iteration traced; stamping is {trace_rate / concrete_rate:.1f}x faster)")
    print(f"  {'first replay':15s}{r['first_s']:7.2f} CPU s  {first_rate:10,.0f} instructions/CPU s  (resolves the program once)")
    print(f"  {'replay':15s}{r['replay_s']:7.2f} CPU s  {replay_rate:10,.0f} instructions/CPU s  (target >= 500,000; "
          f"median of {args.replays})")
    checked_rate = k / r["checked_s"]
    print(f"  {'checked replay':15s}{r['checked_s']:7.2f} CPU s  {checked_rate:10,.0f} instructions/CPU s  (every rule again)")
    print(f"  replay is {replay_rate / trace_rate:.1f}x the trace rate and {replay_rate / checked_rate:.1f}x "
          f"the checked replay")


if __name__ == "__main__":
    main()
