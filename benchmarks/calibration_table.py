"""Every published measurement of `trnlab.hardware.calibration.ROWS`, run timing-only: ours vs published.

    python benchmarks/calibration_table.py                 # all rows (a few minutes), writes the JSON
    python benchmarks/calibration_table.py --source CS149  # one source (MM-trn1, OPT-trn2, CS149, MAMBA)
    python benchmarks/calibration_table.py --no-json       # print only
    python benchmarks/calibration_table.py --what-if       # the CS149 rows under the fit their calibration half implies

Prints per row the published figure, ours, the error and the half (calibration / held-back), then the
summary per half and the lessons, and writes notebooks/data/calibration.json (rows, summary, lessons)
for notebook 05 (`trnlab.hardware.calibration.load` / `format_table` / `plot_errors`). The kernels
are trnlab's own, in AWS's public style: `trnlab.kernels.matmul_ladder`, `.vector_add`, `.mamba`.
Simulated figures do not depend on the machine's load (timing-only is deterministic); wall time does.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware import calibration as cal
from trnlab.hardware import presets
from trnlab.kernels import mamba, vector_add
from trnlab.kernels import matmul_ladder as ladder

JSON_PATH = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "calibration.json"


def _profiled(run, dtype) -> dict:
    raw = run.core.profile(dtype=np.dtype(dtype) if dtype == "float32" else dtype).active
    active = {e: 100.0 * raw.get(e, 0.0) for e in ("pe", "dve", "act")}
    active["dma"] = 100.0 * raw.get("dma (any queue)", 0.0)
    return active


def _matmul(row: cal.Row):
    kernel = getattr(ladder, row.kernel)
    dtype = "bfloat16" if row.dtype == "bf16" else "float32"
    target = row.chip
    need = ladder.block_free_sbuf_bytes(ladder.AWS_SHAPE["K"], dtype)
    spec = presets.TRN1 if row.chip == "trn1" else presets.TRN2
    if kernel is ladder.matmul_block_free and need > spec.core.sbuf_partition_bytes:
        # as benchmarks/calibrate.py: the tutorial's block-free kernel does not fit SBUF as written
        target = spec.core.derive(sbuf_partition_bytes=need)
    r = ladder.run_step(kernel, dtype=dtype, target=target, **ladder.AWS_SHAPE)
    return r.latency_us, r.active, ""


def _vector_add(row: cal.Row, target=None, **options):
    n = int(row.shape.strip("[]"))
    setting = int(row.kernel.split()[-1])
    vec = nki.ShapeDtype((n,), np.float32)
    target = target or row.chip
    if "ROW_CHUNK" in row.kernel:
        run = nki.run(vector_add.vector_add_rows, vec, vec, target=target, timing_only=True, ROW_CHUNK=setting,
                      **options)
    else:
        run = nki.run(vector_add.vector_add_stream, vec, vec, target=target, timing_only=True, FREE_DIM=setting,
                      **options)
    return run.latency_us, _profiled(run, "float32"), ""


# What the CS149 calibration rows imply (docs/calibration.md, "What the calibration half says"), NOT the
# model: tiles allocated once (no multi-buffering without the middle end), Trn2's time per descriptor
# fitted on cs149-stream-2, a fixed start-up per kernel fitted on cs149-stream-2000.
WHAT_IF_DESCRIPTOR_NS = 18.0
WHAT_IF_LAUNCH_US = 28.0 - 15.3


def what_if() -> list[dict]:
    target = presets.TRN2.core.derive(dma_descriptor_ns=WHAT_IF_DESCRIPTOR_NS)
    results = []
    for row in (r for r in cal.ROWS if r.source == "CS149"):
        latency_us, active, _ = _vector_add(row, target=target, ONE_BUFFER=True)
        results.append(cal.result(row, latency_us + WHAT_IF_LAUNCH_US, active,
                                  f"ONE_BUFFER, {WHAT_IF_DESCRIPTOR_NS:g} ns/descriptor, +{WHAT_IF_LAUNCH_US:.1f} µs"))
    return results


def _mamba(row: cal.Row):
    channels = int(row.shape.split("channels ")[1].split(",")[0])
    seq = int(row.shape.split("seq ")[1].split(",")[0])
    kernel = getattr(mamba, row.kernel.split()[0])

    def sd(*shape):
        return nki.ShapeDtype(shape, np.float32)
    args = (sd(1, channels, seq), sd(1, channels, seq), sd(channels, 16), sd(1, 16, seq), sd(1, 16, seq))
    note = ""
    spill = kernel is mamba.mamba_v2 and seq > 512
    with config.override(spill=True) if spill else _nothing():
        run = nki.run(kernel, *args, target=row.chip, timing_only=True)
    if spill:
        note = f"spilled {run.core.profile().spilled_bytes / 2**20:.0f} MiB (TRNLAB_SPILL, ASSUMED)"
    return run.latency_us, _profiled(run, "float32"), note


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


RUNNERS = {"MM-trn1": _matmul, "OPT-trn2": _matmul, "CS149": _vector_add, "MAMBA": _mamba}


def run_rows(rows: list[cal.Row]) -> list[dict]:
    results = []
    for row in rows:
        t0 = time.perf_counter()
        latency_us, active, note = RUNNERS[row.source](row)
        res = cal.result(row, latency_us if row.latency_us is not None else None, active, note)
        res["ours_us"] = latency_us                     # always recorded (OPT-trn2 publishes no latency)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        err = "" if res["latency_error"] is None else f"error {100 * res['latency_error']:+6.1f} %"
        act = "  ".join(f"{e} {a['published']:.1f}/{a['ours']:.1f}" for e, a in res["active"].items())
        print(f"  {row.id:24s} {row.chip} published {cal._us(row.latency_us):>10s} ours {cal._us(latency_us):>10s}  "
              f"{err:16s} {act:28s} {row.half:11s} ({res['wall_s']} s) {note}", flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=sorted(cal.SOURCES))
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--what-if", action="store_true")
    args = ap.parse_args()
    if args.what_if:
        results = what_if()
        print(cal.format_table({"rows": results, "summary": cal.summary(results), "lessons": cal.lessons(results)}))
        return
    rows = [r for r in cal.ROWS if args.source in (None, r.source)]
    results = run_rows(rows)
    data = {"rows": results, "summary": cal.summary(results), "lessons": cal.lessons(results)}
    print()
    print(cal.format_table(data))
    if not args.no_json and args.source is None:
        cal.save(results, JSON_PATH)
        print(f"\nwrote {JSON_PATH}")


if __name__ == "__main__":
    main()
