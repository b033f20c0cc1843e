"""Check for notebook 10's kernel exercise: a residual add that gets Trn3's speed-up (cases / run beside
the student / judge elsewhere, as notebook 05's kernels are checked).

The student's kernel runs through trnlab.nki beside the student's code, with the package's own add
kernels switched off: in full mode on small shapes (its values), and timing-only on one simulated
Trn3 core and one Trn2 core on larger shapes drawn at check time. What comes back is plain data — the
output values, the two latencies, the engines' busy time and the shape of every DMA the kernel issued.
The judge runs the course library's add kernel (`trnlab.kernels.elementwise.add`) on the same shape
and target, in its own process, and holds the student's Trn3 time to TIME_TARGET of it.

Why this exercise: an add is memory-bound, so from a Trn2 core to a Trn3 core it should gain what the
core's 16 DMA engines move (23 -> 33 GB/s each, about 1.4x on the checker's shapes, the runtime's
start-up included). Every DMA also takes `dma_issue_ns` (478 ns on both) on the core's one issuer,
whatever it carries: a kernel whose DMAs move too few bytes for that (1 KiB per partition) is paced
by the issuer, not by bytes, and gains 1.00x. Measured (timing-only, both dtypes on the shapes the cases
draw, with the kernels of the exercise's tests): tiles of 4 or 8 KiB per partition run at 100 % of
the reference on Trn3 and gain 1.29-1.43x, as it does; whole rows at 100-103 %; tiles of 2 KiB per partition —
[128, 512] fp32, [128, 1024] bf16 — at 100 % on Trn2 and 102-103 % on Trn3, a gain of 1.26-1.38x (a
2 KiB descriptor's 64 ns is just above its bytes' 62 ns); tiles of 1 KiB — [128, 256] fp32, [128, 512] bf16 — at
123-131 % on Trn2 and 158-186 % on Trn3, a gain of 1.00x (their DMAs' issue time is 99-100 % of the
kernel's time after the start-up; with no issue cost they would run at the reference's speed); one
set of tiles reused by every iteration at 171-206 %; tiles of 64 partitions at 115-119 % (the Vector
engine 75-86 % busy: outside the statement's 128 partitions, so the verdict depends on the shape drawn).
"""

from __future__ import annotations

import math

import numpy as np

import trnlab.nki as nki
from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.hardware import dtypes, presets

NOTEBOOK = "10_generations_cost_and_energy"
NEW, OLD = "trn3", "trn2"
TIME_TARGET = 1.20          # the student's Trn3 time at most 120 % of the reference's, measured in the same run
VECTOR_LIMIT = 0.85         # a Vector engine busier than this sets the kernel's time
ISSUE_LIMIT = 0.95          # DMAs whose issue time is this much of the kernel's (after start-up) set its time
# The course library's add kernels (and the 1-D vector add of the DMA lesson): the student writes one.
PACKAGE_ADDS = ("trnlab.kernels.elementwise.add", "trnlab.kernels.pointwise.binary",
                "trnlab.kernels.vector_add.vector_add_stream", "trnlab.kernels.vector_add.vector_add_rows")
TIMED_SHAPES = [(1024, 2048), (2048, 2048), (4096, 2048), (1024, 4096), (2048, 4096), (1024, 8192)]


def _as_kernel(answer):
    return answer if isinstance(answer, nki.Kernel) else nki.jit(answer)


def _operands(case: dict):
    rng = np.random.default_rng(case["seed"])
    dtype = dtypes.bfloat16 if case["dtype"] == "bfloat16" else np.float32
    shape = (case["R"], case["C"])
    return [rng.standard_normal(shape).astype(np.float32).astype(dtype) for _ in range(2)]


def _shape_text(case: dict) -> str:
    return f"x, y [{case['R']}, {case['C']}] {case['dtype']}"


def _itemsize(dtype: str) -> int:
    return dtypes.itemsize(dtypes.as_dtype(dtype))


def _access_shape(program, access) -> tuple[int, ...] | None:
    """The shape of one DMA operand (a region of a buffer), or None for an index it cannot read."""
    shape = tuple(program.buffers[access.buffer].shape)
    if access.index is None:
        return shape
    index = access.index if isinstance(access.index, tuple) else (access.index,)
    out = []
    for axis, item in enumerate(index):
        if isinstance(item, slice):
            out.append(len(range(*item.indices(shape[axis]))))
        elif not isinstance(item, (int, np.integer)):
            return None
    return tuple(out) + shape[len(index):]


def dma_rows(program) -> list[list[int]]:
    """[partitions, bytes per partition, count] of the DMAs a traced kernel issues, read on the SBUF
    side of each transfer (one descriptor per partition row)."""
    counts: dict[tuple[int, int], int] = {}
    for instruction in program.instructions:
        if not instruction.opcode.startswith("dma"):
            continue
        for access in instruction.operands.values():
            buffer = program.buffers[access.buffer]
            shape = _access_shape(program, access) if buffer.memory == "sbuf" else None
            if shape:
                partitions = int(shape[0])
                row = int(math.prod(shape[1:])) * _itemsize(buffer.dtype)
                counts[(partitions, row)] = counts.get((partitions, row), 0) + 1
                break
    return [[p, row, n] for (p, row), n in sorted(counts.items())]


def _timed(kernel, case: dict, target: str) -> dict:
    args = [nki.ShapeDtype((case["R"], case["C"]), case["dtype"]) for _ in range(2)]
    run = nki.run(kernel, *args, target=target, timing_only=True)
    profile = run.profile()
    total = max(profile.total_ns, 1.0)
    queues = sum(ns for engine, ns in profile.busy_ns.items() if engine.startswith("dma"))
    return {"us": plain.number(run.latency_us), "hbm_bytes": plain.number(profile.hbm_bytes),
            "vector_busy": plain.number(profile.busy_ns.get("dve", 0.0) / total),
            "queues_in_flight": plain.number(queues / total), "dmas": dma_rows(run.program)}


_REFERENCE: dict[tuple, dict] = {}


def reference_run(case: dict, target: str) -> dict:
    """The library's add kernel on the case's shape and target, timing-only (once per process)."""
    key = (case["R"], case["C"], case["dtype"], target)
    if key not in _REFERENCE:
        from trnlab.kernels import elementwise

        _REFERENCE[key] = _timed(elementwise.add, case, target)
    return _REFERENCE[key]


def _kib(nbytes: float) -> str:
    return f"{nbytes / 1024:.3g} KiB"


def why_slow(yours: dict, yours_old: dict, reference: dict, reference_old: dict) -> str:
    """The cause, read off the runs: DMAs paced by the issuer or by their descriptors, too few
    partitions, a busy Vector engine, or too few transfers in flight."""
    new, old = presets.CORES[NEW], presets.CORES[OLD]
    gain, gain_ref = yours_old["us"] / yours["us"], reference_old["us"] / reference["us"]
    dmas = yours["dmas"]
    partitions, row, _ = max(dmas, key=lambda d: d[0] * d[1] * d[2]) if dmas else (0, 0, 0)
    body_us = yours["us"] - new.launch_ns / 1e3   # after the runtime's start-up
    transfers = sum(n for _, _, n in dmas)
    issue_us = transfers * new.dma_issue_ns / 1e3     # the one issuer's time: a floor under the kernel's
    if transfers and new.dma_issue_ns and issue_us >= ISSUE_LIMIT * body_us:
        rate = min(new.hbm_bandwidth, new.dma_engines * new.dma_engine_bandwidth)
        return (f"your kernel issues {transfers} DMAs of {_kib(row)} per partition ({partitions * row / 1024:,.0f} KiB "
                f"each); the core's one DMA issuer spends {new.dma_issue_ns:.0f} ns on every DMA whatever it "
                f"carries ({old.dma_issue_ns:.0f} ns on {OLD}): {transfers} × {new.dma_issue_ns:.0f} ns = "
                f"{issue_us:.1f} µs of your kernel's {body_us:.1f} µs after the runtime's start-up, on {NEW} as on "
                f"{OLD}, while its {yours['hbm_bytes'] / 2**20:.0f} MiB take "
                f"{yours['hbm_bytes'] / rate * 1e6:.1f} µs at the {rate / 1e9:.0f} GB/s a {NEW} core's DMA engines "
                f"reach — the issuer, not bandwidth, sets the time, so your kernel gains {gain:.2f}× where the "
                f"reference gains {gain_ref:.2f}×. Move more bytes in each DMA: at least 4 KiB per partition")
    knee_new = new.dma_descriptor_ns * new.dma_engine_bandwidth / 1e9      # bytes a descriptor's time covers
    knee_old = old.dma_descriptor_ns * old.dma_engine_bandwidth / 1e9
    descriptors = sum(p * n for p, _, n in dmas)
    paced_us = descriptors * new.dma_descriptor_ns / new.dma_engines / 1e3
    gathered = new.dma_hbm_gather_bandwidth and new.dma_hbm_gather_min_bytes <= row < new.dma_hbm_gather_below_bytes
    if partitions and row < knee_new and not gathered and paced_us >= ISSUE_LIMIT * body_us:
        return (f"your DMAs move {_kib(row)} per partition each ({row} bytes, one descriptor per partition); "
                f"a descriptor takes at least {new.dma_descriptor_ns:.0f} ns whatever it carries, and {row} bytes "
                f"take {row / new.dma_engine_bandwidth * 1e9:.0f} ns at a {NEW} DMA engine's "
                f"{new.dma_engine_bandwidth / 1e9:.0f} GB/s ({row / old.dma_engine_bandwidth * 1e9:.0f} ns at "
                f"{OLD}'s {old.dma_engine_bandwidth / 1e9:.0f}): below {knee_new:,.0f} bytes per partition on {NEW} "
                f"({knee_old:,.0f} on {OLD}) the descriptor's fixed cost, not bandwidth, sets the time — "
                f"{descriptors} descriptors × {new.dma_descriptor_ns:.0f} ns over {new.dma_engines} engines = "
                f"{paced_us:.1f} µs, on {NEW} as on {OLD}, so your kernel gains {gain:.2f}× where the reference "
                f"gains {gain_ref:.2f}×. Move at least 4 KiB per partition in each DMA")
    vector = (f"the Vector engine is the limit: {100 * yours['vector_busy']:.0f}% busy (the reference's: "
              f"{100 * reference['vector_busy']:.0f}%)")
    if partitions and partitions < new.partitions:
        lanes = new.partitions // new.dma_engines
        return (f"your tiles use {partitions} of the {new.partitions} partitions: an instruction's time is set "
                f"by its free size, not its partitions, so each add does {partitions}/{new.partitions} of the "
                f"work it could — {vector} — and a DMA of {partitions} partitions runs on "
                f"{-(-partitions // lanes)} of the {new.dma_engines} DMA engines (one per {lanes} partitions)")
    if yours["vector_busy"] >= VECTOR_LIMIT:
        return vector
    if yours["queues_in_flight"] < 0.5 * reference["queues_in_flight"]:
        return (f"too few transfers in flight: on average {yours['queues_in_flight']:.1f} of the "
                f"{new.dma_queues} DMA queues had a transfer running (the reference's: "
                f"{reference['queues_in_flight']:.1f}) — each tile's loads wait for the tile before it "
                f"(tiles allocated once, outside the loop, are reused by every iteration where the compiler "
                f"keeps the kernel's storage, as NKI allocation does); allocate the tiles inside the loop (or "
                f"ask for CompileConfig(split_reused_buffers=True)) so the next tile's loads run while this "
                f"one is added and stored")
    return (f"the DMA queues averaged {yours['queues_in_flight']:.1f} transfers in flight (the reference's: "
            f"{reference['queues_in_flight']:.1f}) and the Vector engine was {100 * yours['vector_busy']:.0f}% "
            f"busy (the reference's: {100 * reference['vector_busy']:.0f}%)")


@exercise("nb10_trn3_add", notebook=NOTEBOOK, points=3, answer="residual_add",
          title="A kernel that gets Trn3's speed-up: a residual add", asks_for=PACKAGE_ADDS)
class Trn3Add:
    def cases(rng):
        values = [{"mode": "values", "R": int(128 * rng.integers(1, 4)), "C": 2048, "dtype": "float32"},
                  {"mode": "values", "R": 128, "C": int(rng.choice([2048, 4096])), "dtype": "bfloat16"}]
        timed = []
        for dtype in ("float32", "bfloat16"):
            R, C = TIMED_SHAPES[int(rng.integers(0, len(TIMED_SHAPES)))]
            timed.append({"mode": "time", "R": R, "C": C, "dtype": dtype})
        for case in values + timed:
            case["seed"] = int(rng.integers(0, 2**31))
        return values + timed

    def run(residual_add, case):
        kernel = _as_kernel(residual_add)
        if case["mode"] == "time":
            return {NEW: _timed(kernel, case, NEW), OLD: _timed(kernel, case, OLD)}
        out = nki.run(kernel, *_operands(case), target=NEW).outputs
        if type(out) is not np.ndarray:
            raise CheckFailed(f"expected the kernel to return an HBM tensor (it comes back as a NumPy array), got "
                              f"{type(out).__name__}; return the nl.shared_hbm tensor you stored into")
        return {"out": plain.array(out.astype(np.float32)), "dtype": str(out.dtype)}

    def judge(case, got):
        if case["mode"] == "values":
            x, y = _operands(case)
            expected = (x.astype(np.float32) + y.astype(np.float32)).astype(x.dtype).astype(np.float32)
            if got["dtype"] != case["dtype"]:
                raise CheckFailed(f"expected a {case['dtype']} result (x's dtype), got {got['dtype']} for "
                                  f"{_shape_text(case)}")
            out = got["out"]
            if out.shape != expected.shape:
                raise CheckFailed(f"expected a result of shape {expected.shape}, got {out.shape} for "
                                  f"{_shape_text(case)}")
            tolerance = 1e-2 if case["dtype"] == "bfloat16" else 1e-5
            error = np.abs(out - expected)
            if not np.all(error <= tolerance * (1 + np.abs(expected))):
                worst = np.unravel_index(np.argmax(error), error.shape)
                raise CheckFailed(f"expected x + y; the largest difference is {error[worst]:.3g} at "
                                  f"{tuple(map(int, worst))} for {_shape_text(case)}")
            return
        yours, yours_old = got[NEW], got[OLD]
        need = 3 * case["R"] * case["C"] * _itemsize(case["dtype"])
        if yours["hbm_bytes"] < need:
            raise CheckFailed(f"expected your kernel to read x and y and write x + y, at least {need / 2**20:.0f} MiB "
                              f"through HBM, but it moved {yours['hbm_bytes'] / 2**20:.1f} MiB for "
                              f"{_shape_text(case)} (do your tiles cover the whole shape?)")
        reference, reference_old = reference_run(case, NEW), reference_run(case, OLD)
        if yours["us"] > TIME_TARGET * reference["us"]:
            raise CheckFailed(
                f"expected a {NEW} time within {100 * TIME_TARGET:.0f}% of the reference kernel's "
                f"({reference['us']:.1f} µs, simulated in this run), got {yours['us']:.1f} µs "
                f"({100 * yours['us'] / reference['us']:.0f}%) for {_shape_text(case)} — on {OLD} yours takes "
                f"{yours_old['us']:.1f} µs ({100 * yours_old['us'] / reference_old['us']:.0f}% of the reference's "
                f"{reference_old['us']:.1f}). Why: " + why_slow(yours, yours_old, reference, reference_old))
