"""Every published measurement of `trnlab.hardware.calibration.ROWS`, run timing-only: ours vs published.

    python benchmarks/calibration_table.py                 # all rows (a few minutes), writes the JSON
    python benchmarks/calibration_table.py --source CS149  # one source (MM-trn1, OPT-trn2, CS149, MAMBA, AUTOTUNE)
    python benchmarks/calibration_table.py --no-json       # print only
    python benchmarks/calibration_table.py --what-if before  # every row under the model before 2026-12-04,
                                                             # or a candidate mechanism (WHAT_IF)

Prints per row the published figure, ours, the error and the half (calibration / held-back), then the
summary per half and the lessons, and writes notebooks/data/calibration.json (rows, summary, lessons)
for notebook 05 (`trnlab.hardware.calibration.load` / `format_table` / `plot_errors`). The kernels
are trnlab's own, in AWS's public style: `trnlab.kernels.matmul_ladder`, `.vector_add`, `.mamba`,
`.matmul_psum_pipeline`; the [AUTOTUNE] attention rows run AWS's NKI Library `attention_cte` unmodified
through trnlab's zero-edit import hook (`--nkilib PATH`, default $NKILIB or /work/nkilib), and the
[CS149-student] rows the student's own kernels from their repository (`--cs149-solution PATH`, default
$CS149_SOLUTION or /work/cs149-solution).
Simulated figures do not depend on the machine's load (timing-only is deterministic); wall time does.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware import calibration as cal
from trnlab.hardware import presets
from trnlab.kernels import mamba, vector_add
from trnlab.kernels import matmul_ladder as ladder
from trnlab.kernels import matmul_psum_pipeline as psum_pipeline

JSON_PATH = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "calibration.json"


def _profiled(run, dtype) -> dict:
    raw = run.core.profile(dtype=np.dtype(dtype) if dtype == "float32" else dtype).active
    active = {e: 100.0 * raw.get(e, 0.0) for e in ("pe", "dve", "act")}
    active["dma"] = 100.0 * raw.get("dma (any queue)", 0.0)
    return active


def _matmul(row: cal.Row, target=None, SPILL: bool = False, DMA_ACTIVE: str = "any queue", **_):
    """A ladder kernel; its DMA figure "any queue" (from each transfer's trigger, the table's) or
    "transferring" (Profile.dma_transferring: from the end of the fixed latency, AWS's definition)."""
    kernel = getattr(ladder, row.kernel)
    dtype = "bfloat16" if row.dtype == "bf16" else "float32"
    spec = target or presets.core_spec(row.chip)
    need = ladder.block_free_sbuf_bytes(ladder.AWS_SHAPE["K"], dtype)
    spill = False
    if kernel is ladder.matmul_block_free and need > spec.sbuf_partition_bytes:
        # as benchmarks/calibrate.py: the tutorial's block-free kernel does not fit SBUF as written;
        # SPILL (a candidate): run it in the chip's SBUF with trnlab's spill rule (TRNLAB_SPILL, ASSUMED)
        if SPILL:
            spill = True
        else:
            spec = spec.derive(sbuf_partition_bytes=need)
    with config.override(spill=True) if spill else _nothing():
        r = ladder.run_step(kernel, dtype=dtype, target=spec, **ladder.AWS_SHAPE)
    if DMA_ACTIVE == "transferring":
        r.active["dma"] = 100.0 * r.profile.dma_transferring
    if spill:
        return r.latency_us, r.active, (f"dma transferring {100 * r.profile.dma_transferring:.1f} %, spilled "
                                        f"{r.profile.spilled_bytes / 2**20:.0f} MiB (TRNLAB_SPILL, ASSUMED)")
    # the DMA figure compared is "any queue" (from each transfer's trigger); AWS's profiler counts a
    # DMA packet transferring (Profile.dma_transferring, without the fixed latency): both printed
    return r.latency_us, r.active, f"dma transferring {100 * r.profile.dma_transferring:.1f} %"


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


def _mamba(row: cal.Row, target=None, **options):
    channels = int(row.shape.split("channels ")[1].split(",")[0])
    seq = int(row.shape.split("seq ")[1].split(",")[0])
    kernel = getattr(mamba, row.kernel.split()[0])

    def sd(*shape):
        return nki.ShapeDtype(shape, np.float32)
    args = (sd(1, channels, seq), sd(1, channels, seq), sd(channels, 16), sd(1, 16, seq), sd(1, 16, seq))
    note = ""
    spill = kernel is mamba.mamba_v2 and seq > 512
    if kernel is not mamba.mamba_v2:
        options = {}
    elif options.get("HOIST_DELTA_U") == "if-fits":     # hoisted where the kernel fits SBUF without spilling
        options = {**options, "HOIST_DELTA_U": not spill}
    with config.override(spill=True) if spill else _nothing():
        run = nki.run(kernel, *args, target=target or row.chip, timing_only=True, **options)
    if spill:
        note = f"spilled {run.core.profile().spilled_bytes / 2**20:.0f} MiB (TRNLAB_SPILL, ASSUMED)"
    # AWS's VectorE % is of the "actual execution period" (the page's Selection Summary, start-up and
    # tear-down excluded): the Vector engine's busy time from the kernel's first instruction to its
    # last result (the whole run when the preset has no start-up)
    launch = run.launch.timeline.columns()
    period = float(launch["ready"].max() - launch["start"].min())
    active = _profiled(run, "float32")
    active["dve"] = 100.0 * run.launch.timeline.busy_ns()["dve"] / period
    return run.latency_us, active, note


# AWS's NKI Library checkout (its attention_cte runs unmodified through trnlab's zero-edit import hook)
NKILIB = {"path": Path(os.environ.get("NKILIB", "/work/nkilib"))}


def _attention_cte():
    """The library's `attention_cte`, imported as AWS ships it: its `nki` imports get trnlab."""
    src = NKILIB["path"] / "src"
    if not (src / "nkilib_src").is_dir():
        raise SystemExit(f"the [AUTOTUNE] attention rows need AWS's NKI Library: no {src / 'nkilib_src'} "
                         f"(--nkilib PATH or NKILIB=PATH)")
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    sys.dont_write_bytecode = True                    # nothing written into the library's tree
    from trnlab.nki import zero_edit
    zero_edit.install()
    from nkilib_src.nkilib.core.attention.attention_cte import attention_cte
    return attention_cte


# the CS149 student's repository (its kernels run unmodified through trnlab's zero-edit import hook)
CS149_SOLUTION = {"path": Path(os.environ.get("CS149_SOLUTION", "/work/cs149-solution"))}


@functools.lru_cache(maxsize=None)
def _student_kernel(part: str, module: str, name: str):
    """A kernel of the student's checkout (part1/kernels.py, part2/conv2d.py), imported as published (once)."""
    folder = CS149_SOLUTION["path"] / part
    if not (folder / f"{module}.py").is_file():
        raise SystemExit(f"the [CS149-student] rows need the student's repository "
                         f"(github xaviergonzalez/asst4-trainium2): no {folder / (module + '.py')} "
                         f"(--cs149-solution PATH or CS149_SOLUTION=PATH)")
    sys.dont_write_bytecode = True                    # nothing written into the checkout
    from trnlab.nki import zero_edit
    zero_edit.install()
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"cs149_{part}_{module}", folder / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return getattr(loaded, name)


def _student(row: cal.Row, target=None, **_):
    """The student's transpose (run_benchmark.py --kernel transpose -n 1024: fp32 [1024, 1024]) or
    fused conv2d + maxpool (test_harness.py's performance tests: batch 1, 256 -> 256 channels, 224 x 224,
    3 x 3 filters), timing-only: the harness's P99 of identical runs is one run's latency here."""
    target = target or row.chip
    dtype = "float16" if row.dtype == "fp16" else "float32"
    if row.id == "cs149-transpose":
        run = nki.run(_student_kernel("part1", "kernels", "matrix_transpose"), nki.ShapeDtype((1024, 1024), dtype),
                      target=target, timing_only=True)
    else:
        pool = 2 if "pool_size 2" in row.kernel else 1
        shapes = ((1, 256, 224, 224), (256, 256, 3, 3), (256,))
        run = nki.run(_student_kernel("part2", "conv2d", "fused_conv2d_maxpool"),
                      *(nki.ShapeDtype(s, dtype) for s in shapes), target=target, timing_only=True, pool_size=pool)
    return run.latency_us, _profiled(run, dtype), ""


def _autotune(row: cal.Row, target=None, **_):
    """[AUTOTUNE]: our matmul ladder kernels or the library's attention_cte, bf16, timing-only; the
    note gives MFU the tuner's way (FLOPs / (latency x 2 x 128 x 128 x 2.4 GHz)), ours and published."""
    target = target or row.chip
    if row.kernel.startswith("nkilib attention_cte"):
        seq = int(row.shape.split("q [1, ")[1].split(",")[0])
        d = 128
        q, k, v = (nki.ShapeDtype(s, "bfloat16") for s in ((1, seq, d), (1, d, seq), (1, seq, d)))
        run = nki.run(_attention_cte(), q, k, v, target=target, timing_only=True, scale=1.0 / math.sqrt(d),
                      causal_mask=True)
        flops = cal.attention_flops(seq, d)
    else:
        run, _ = psum_pipeline.run(getattr(psum_pipeline, row.kernel), target=target)
        flops = cal.MATMUL_2048_FLOPS
    ours, published = (100.0 * flops / (us * 1e-6 * cal.AUTOTUNE_PEAK_FLOPS) for us in (run.latency_us, row.latency_us))
    return run.latency_us, _profiled(run, "bfloat16"), f"MFU {ours:.1f} % (published {published:.1f} %)"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# The candidate mechanisms for the largest misses (docs/calibration.md, "What was tried for the largest
# misses"), each with its constants fitted on rows of the CALIBRATION half only or read off a public
# page (the derivation beside each): `--what-if NAME` runs every row under one of them and prints both
# halves and the lessons.
#   spec:     fields of the row's chip's CoreSpec replaced (`CoreSpec.derive`), per chip
#   options:  keyword arguments of the CS149 kernels
#   mamba:    keyword arguments of mamba_v2 (HOIST_DELTA_U; "if-fits": where it runs without spilling)
#   matmul:   SPILL: the block-free kernel in the chip's SBUF with the spill rule (else SBUF enlarged)
# Since 2026-12-04 the model is (d) + (b) + start-up below (presets.py: `dma_hbm_gather_bandwidth`,
# `dma_issue_ns`, `dma_descriptor_ns`, `launch_start_ns` / `launch_end_ns`). The candidates up to (d)
# were fitted against the model before it, `before` (those fields off, Trn2's descriptor 100 ns), and
# run on top of it; (e) - (g) run on top of the model.
BEFORE = {"trn1": {"dma_hbm_gather_bandwidth": 0.0, "launch_start_ns": 0.0, "launch_end_ns": 0.0, "dma_issue_ns": 0.0},
          "trn2": {"dma_hbm_gather_bandwidth": 0.0, "launch_start_ns": 0.0, "launch_end_ns": 0.0,
                   "dma_issue_ns": 0.0, "dma_descriptor_ns": 100.0}}
# The start-up (CoreSpec.launch_start_ns / launch_end_ns: core.start_launch / end_launch): Trn1 read
# off AWS's fused-Mamba profile [LAUNCH] (the kernel's first DMA 13.0 µs after the profile starts, its
# last DMA 4.3 µs before the end); Trn2 fitted on cs149-stream-2000 (calibration): the chip's one-step
# kernel minus ours before, the tear-down ASSUMED as Trn1's.
START_UP_US = 28.0 - 15.3
LAUNCH = {"trn1": {"launch_start_ns": 13_000.0, "launch_end_ns": 4_300.0},
          "trn2": {"launch_start_ns": START_UP_US * 1e3 - 4_300.0, "launch_end_ns": 4_300.0}}
GATHER_TRN1 = 104.1e9      # (d) below: fitted on mm-trn1-hoisted (calibration)
GATHER_TRN2_FIT = 215e9    # (i) below: the slowest Trn2 rate at which autotune-mm-hand (calibration) keeps its time


def _on_before(spec: dict) -> dict:
    """A candidate's fields on top of `BEFORE`, per chip (both chips: the fields it leaves are off)."""
    return {chip: {**BEFORE[chip], **spec.get(chip, {})} for chip in BEFORE}


WHAT_IF = {
    # the model before 2026-12-04, which the candidates (a) - (d) were fitted against
    "before": {"spec": BEFORE, "options": {}},
    # the start-up alone
    "start-up": {"spec": _on_before(LAUNCH), "options": {}},
    # (a) tiles allocated once (what "effectively the same" as sequential_range suggests without the
    # middle end), Trn2 dma_descriptor_ns 18 fitted on cs149-stream-2 under ONE_BUFFER, the start-up above
    "one-buffer": {"spec": _on_before({"trn1": LAUNCH["trn1"], "trn2": {**LAUNCH["trn2"], "dma_descriptor_ns": 18.0}}),
                   "options": {"ONE_BUFFER": True}},
    # (c) a descriptor's time grows with its bytes: bytes / bandwidth + a fixed part (no floor), with
    # (a)'s one buffer and the start-up. Trn1's fixed part fitted on mm-trn1-hoisted's latency (42.96 ms:
    # 92.8 ns; a 1 KiB bf16 row then takes 153 ns, the model's 150 ns); Trn2's on cs149-stream-2 under
    # one buffer with the start-up (186 µs: 12.6 ns; a 2 KiB fp32 row then takes 101.6 ns, within
    # opt-trn2-hoisted's bound of 107 ns)
    "bytes+setup": {"spec": _on_before({"trn1": {**LAUNCH["trn1"], "dma_descriptor_ns": 0.0, "dma_descriptor_setup_ns": 92.8},
                                        "trn2": {**LAUNCH["trn2"], "dma_descriptor_ns": 0.0, "dma_descriptor_setup_ns": 12.6}}),
                    "options": {"ONE_BUFFER": True}},
    # (b) a fixed issue cost per transfer on one issuer per core (the Neuron Explorer guide: a transfer's
    # descriptors "have to be generated (by the compute engine that issues it)"), the tiles rotating:
    # dma_issue_ns 478 fitted on cs149-rows-1 (3 one-element transfers per step, 1.458 µs per step on
    # the chip), then dma_descriptor_ns 70.7 on cs149-stream-2 (the engines then bind: 3 x 8 descriptors
    # per engine per step). Trn2 only: no Trn1 row of either half has tiny transfers to fit it on.
    "issue": {"spec": _on_before({"trn2": {"dma_issue_ns": 478.0, "dma_descriptor_ns": 70.7}}), "options": {}},
    # (b) with the start-up: the same two fits with START_UP_US taken off the chip's figures first
    # (cs149-rows-1 -> 478 ns, cs149-stream-2 -> 64 ns)
    "issue+start-up": {"spec": _on_before({"trn1": LAUNCH["trn1"],
                                           "trn2": {**LAUNCH["trn2"], "dma_issue_ns": 478.0, "dma_descriptor_ns": 64.0}}),
                       "options": {}},
    # (d) gathered short runs (docs/calibration.md, "The Trn1 tiled kernel, mechanism by mechanism"): a
    # transfer cut out of a wider HBM tensor in runs of 256 B up to 2 KiB ([DMA-BW]'s middle band) moves
    # its bytes at a rate of the core's, in place of the per-descriptor time. Trn1's rate fitted on
    # mm-trn1-hoisted's latency (42.96 ms: 104.1 GB/s; its [128, 512] bf16 loads are 1 KiB runs);
    # Trn2's not fitted: the aggregate DMA rate of [DMA-BW]'s table, 16 x 23 B/ns = 368 GB/s
    "gather": {"spec": _on_before({"trn1": {"dma_hbm_gather_bandwidth": GATHER_TRN1},
                                   "trn2": {"dma_hbm_gather_bandwidth": 368e9}}), "options": {}},
    # (d) + (b) + start-up, each moving rows the others do not (the matmul rows' runs of 256 B - 2 KiB;
    # the CS149 rows' tiny transfers; the one-step kernels' start-up): THE MODEL since 2026-12-04, with
    # (b)'s issue cost on Trn1 too (ASSUMED as Trn2's: no Trn1 row to fit it on)
    "gather+issue+start-up": {"spec": {}, "options": {}},
    # (e) hoist: AWS's compiler computes v2's delta * u (the same in every state) once per channel tile,
    # outside the state loop (loop-invariant code motion): the page's own profile of v2 at seq 8192
    # spills and reloads "the tensor named deltaU" [PERF-GUIDE, Opt #4], which a product used only
    # inside one state step would not need. No constant: on top of the model
    "hoist": {"spec": {}, "options": {}, "mamba": {"HOIST_DELTA_U": True}},
    # (e') the same where the kernel fits SBUF without spilling (v2 at seq 8192 then as written: its
    # Vector busy time on the chip, 58.93 % of 53.3 ms, is the page's code's, not the hoisted code's)
    "hoist-if-fits": {"spec": {}, "options": {}, "mamba": {"HOIST_DELTA_U": "if-fits"}},
    # (g) hoist-if-fits, and the Trn2 block-free kernel (322 KiB per partition in fp32; SBUF has 224)
    # run in the chip's SBUF with trnlab's spill rule (ASSUMED) instead of an enlarged SBUF: on the
    # chip AWS's compiler must have spilled or reloaded to run it
    "hoist+spill": {"spec": {}, "options": {}, "mamba": {"HOIST_DELTA_U": "if-fits"}, "matmul": {"SPILL": True}},
    # (f) one queue per trigger engine [DMA-QUEUE]: a kernel's transfers, all triggered by the Sync
    # engine, on one queue, in order, each transfer's fixed latency overlapping the previous one's data
    # (CoreSpec.dma_queue_pipelined, ASSUMED). No constant; on top of hoist-if-fits
    "hoist+one-queue": {"spec": {chip: {"dma_queues": 1, "dma_queue_pipelined": True} for chip in ("trn1", "trn2")},
                        "options": {}, "mamba": {"HOIST_DELTA_U": "if-fits"}},
    # (h) AWS's DMA-active definition: the [OPT-trn2] rows' DMA figure compared with
    # Profile.dma_transferring ("at least one DMA packet is transferring" [PROFILE]: from the end of a
    # transfer's fixed latency) instead of "any queue" (from its trigger, queue waits included). No
    # constant, no latency moves: on top of the model
    "aws-dma-active": {"spec": {}, "options": {}, "matmul": {"DMA_ACTIVE": "transferring"}},
    # (i) Trn2's gather rate fitted on the calibration half: no calibration row's figure depends on it
    # but autotune-mm-hand's latency (its [128, 512] bf16 loads, 1 KiB runs; opt-trn2-fully-blocked's
    # runs are 4 and 8 KiB, opt-trn2-hoisted's TensorE stays 99.8 % down to 100 GB/s), which is flat
    # from GATHER_TRN2_FIT up (252.1 - 252.4 us, +4.9 - +5.1 %) and rises below it (210 GB/s: 256.2 us,
    # 205: 262.8). The fit is that plateau; its slowest end is the rate most favourable to the
    # held-back blocked-free DMA figure. On top of the model
    "gather-fit": {"spec": {"trn2": {"dma_hbm_gather_bandwidth": GATHER_TRN2_FIT}}, "options": {}},
    # (k) the list schedule's CRITICAL_PATH heuristic (AWS's SchedulingHeuristic page, 2026-11-13: "prefer
    # the instruction on the longest path to the kernel's outputs") for every kernel the list schedule orders
    # (TRNLAB_SCHEDULE_HEURISTIC), on top of the model with (j). No constant
    "critical-path": {"spec": {}, "options": {}, "switches": {"versions": True, "schedule_heuristic": "critical_path"}},
    # (j) tile versions (hardware/versions.py): the address rotation of neuronx-cc's default flow, adopted
    # 2026-12-04 late (nki/compile_config.py). The model as it is: every candidate above runs with every
    # kernel's storage kept as written (TRNLAB_VERSIONS=0), as the model was when they were tried, so
    # gather+issue+start-up is the model without (j). No constant
    "versions": {"spec": {}, "options": {}, "switches": {"versions": True}},
    # (l) recomputation elimination (hardware/recompute.py, TRNLAB_RECOMPUTE): (e') as a compiler rule for every
    # kernel, not a Mamba kernel option — an instruction computing again what an earlier one computed from
    # unchanged inputs is dropped where the program then fits without spilling. On top of the model with (j).
    # No constant
    "recompute": {"spec": {}, "options": {}, "switches": {"versions": True, "recompute": True}},
}


def what_if(name: str, rows: list[cal.Row]) -> list[dict]:
    """Every row of `rows` under the candidate `WHAT_IF[name]`: ours vs published, as `run_rows`. The
    candidates (a) - (i) were run when every kernel's storage was kept as written (before (j) joined the
    model), and still are: their switches default to `versions` off."""
    case = WHAT_IF[name]
    targets = {chip: presets.core_spec(chip).derive(**fields) for chip, fields in case["spec"].items()}
    results = []
    with config.override(**{"versions": False, **case.get("switches", {})}):
        for row in rows:
            results.append(_what_if_row(case, targets, row))
    return results


def _what_if_row(case: dict, targets: dict, row: cal.Row) -> dict:
    t0 = time.perf_counter()
    options = case["options"] if row.source == "CS149" else case.get("mamba", {}) if row.source == "MAMBA" \
        else case.get("matmul", {})
    latency_us, active, note = RUNNERS[row.source](row, target=targets.get(row.chip), **options)
    res = cal.result(row, latency_us if row.latency_us is not None else None, active, note)
    res["ours_us"] = latency_us
    _print(row, res, latency_us, note, round(time.perf_counter() - t0, 1))
    return res


RUNNERS = {"MM-trn1": _matmul, "OPT-trn2": _matmul, "CS149": _vector_add, "CS149-student": _student,
           "MAMBA": _mamba, "AUTOTUNE": _autotune}


def run_rows(rows: list[cal.Row]) -> list[dict]:
    results = []
    for row in rows:
        t0 = time.perf_counter()
        latency_us, active, note = RUNNERS[row.source](row)
        res = cal.result(row, latency_us if row.latency_us is not None else None, active, note)
        res["ours_us"] = latency_us                     # always recorded (OPT-trn2 publishes no latency)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        _print(row, res, latency_us, note, res["wall_s"])
    return results


def _print(row: cal.Row, res: dict, latency_us: float, note: str, wall_s: float) -> None:
    err = "" if res["latency_error"] is None else f"error {100 * res['latency_error']:+6.1f} %"
    act = "  ".join(f"{e} {a['published']:.1f}/{a['ours']:.1f}" for e, a in res["active"].items())
    print(f"  {row.id:24s} {row.chip} published {cal._us(row.latency_us):>10s} ours {cal._us(latency_us):>10s}  "
          f"{err:16s} {act:28s} {row.half:11s} ({wall_s} s) {note}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=sorted(cal.SOURCES))
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--what-if", choices=sorted(WHAT_IF), help="every row under a candidate mechanism (not the model)")
    ap.add_argument("--nkilib", type=Path, default=NKILIB["path"],
                    help="AWS's NKI Library checkout, for the [AUTOTUNE] attention rows (default $NKILIB or /work/nkilib)")
    ap.add_argument("--cs149-solution", type=Path, default=CS149_SOLUTION["path"],
                    help="the CS149 student's repository (github xaviergonzalez/asst4-trainium2), for the "
                         "[CS149-student] rows (default $CS149_SOLUTION or /work/cs149-solution)")
    args = ap.parse_args()
    NKILIB["path"] = args.nkilib
    CS149_SOLUTION["path"] = args.cs149_solution
    rows = [r for r in cal.ROWS if args.source in (None, r.source)]
    if args.what_if:
        results = what_if(args.what_if, rows)
        print()
        print(cal.format_table({"rows": results, "summary": cal.summary(results), "lessons": cal.lessons(results)}))
        return
    results = run_rows(rows)
    data = {"rows": results, "summary": cal.summary(results), "lessons": cal.lessons(results)}
    print()
    print(cal.format_table(data))
    if not args.no_json and args.source is None:
        cal.save(results, JSON_PATH)
        print(f"\nwrote {JSON_PATH}")


if __name__ == "__main__":
    main()
