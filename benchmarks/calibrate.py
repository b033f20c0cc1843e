"""Ours vs AWS's published measurements of its matmul tutorial kernels (docs/calibration.md).

    python benchmarks/calibrate.py            # trn1 latency table (bf16) + trn2 engine-active table (fp32)
    python benchmarks/calibrate.py --trn1     # only the trn1 latency table

Trn1: the NKI matrix-multiplication tutorial's latency table, [4096, 8192] @ [8192, 8192] bf16 on a
trn1.32xlarge core (aws-neuron-sdk docs, general/nki/tutorials/matrix_multiplication, 2024-2025
releases). Trn2: the kernel-optimization guide's profiler table, the same shape in fp32
(`trnlab.kernels.matmul_ladder.AWS_TRN2_ACTIVE`). The kernels are trnlab's own, written in
AWS's style (`trnlab.kernels.matmul_ladder`), timing-only.
"""
from __future__ import annotations

import argparse
import time

from trnlab.hardware import presets
from trnlab.kernels import matmul_ladder as ladder

# Latency (ms) AWS measured on one trn1 NeuronCore (the tutorial's table; HFU in brackets there:
# 10.98, 13.24, 26.51, 85.24 %).
AWS_TRN1_LATENCY_MS = {"matmul_tiled": 51.80, "matmul_hoisted": 42.96, "matmul_block_free": 22.07,
                       "matmul_fully_blocked": 6.97}
# which published figure fitted a constant (docs/calibration.md) and which only checks the model
ROLE = {"matmul_hoisted": "calibration"}


def trn1_table() -> list[dict]:
    rows = []
    for kernel in ladder.LADDER[1:]:
        target = "trn1"
        need = ladder.block_free_sbuf_bytes(ladder.AWS_SHAPE["K"], "bfloat16")
        if kernel is ladder.matmul_block_free and need > presets.TRN1.core.sbuf_partition_bytes:
            target = presets.TRN1.core.derive(sbuf_partition_bytes=need)
        t0 = time.perf_counter()
        r = ladder.run_step(kernel, dtype="bfloat16", target=target, **ladder.AWS_SHAPE)
        wall = time.perf_counter() - t0
        aws = AWS_TRN1_LATENCY_MS[r.name]
        ours = r.latency_us / 1e3
        rows.append({"step": r.step, "ours_ms": ours, "aws_ms": aws, "gap": ours / aws - 1,
                     "mfu": r.mfu, "wall_s": wall, "active": r.active,
                     "role": ROLE.get(r.name, "validation")})
    return rows


def trn2_table() -> list:
    results = []
    for kernel in ladder.LADDER[1:]:
        target = "trn2"
        need = ladder.block_free_sbuf_bytes(ladder.AWS_SHAPE["K"], "float32")
        if kernel is ladder.matmul_block_free and need > presets.TRN2.core.sbuf_partition_bytes:
            target = ladder.roomy_trn2(need)
        results.append(ladder.run_step(kernel, dtype="float32", target=target, **ladder.AWS_SHAPE))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trn1", action="store_true")
    args = ap.parse_args()
    print("trn1, [4096, 8192] @ [8192, 8192] bf16: latency ours vs AWS")
    for r in trn1_table():
        a = r["active"]
        print(f"  {r['step']:22s} ours {r['ours_ms']:7.2f} ms  AWS {r['aws_ms']:6.2f} ms  gap {100 * r['gap']:+6.1f} %"
              f"  MFU {100 * r['mfu']:5.1f} %  DMA {a['dma']:5.1f} % PE {a['pe']:5.1f} %  {r['role']:11s}"
              f"  ({r['wall_s']:.1f} s wall)")
    if args.trn1:
        return
    print("\ntrn2, same shape fp32: engine active %, ours / AWS (3 hoisted loads: calibration, a bound; "
          "the others: validation)")
    print(ladder.format_comparison(trn2_table()))


if __name__ == "__main__":
    main()
