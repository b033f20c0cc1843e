"""The replay: an `Executable` (what the compiler produces, `trnlab.compiler.executable`) run on a chip.

A run (`execute`) replays the partitions in order on core 0 of a `trnlab.hardware.Device` (no Python
tracing: a replay costs one method call per instruction), runs the host ops in PyTorch in between
and gives the run's timeline, shifted to start at 0, with one `Region` per op.

A host op takes the time its cost gives (`compiler.fallback.host_cost`): it starts when the device's
last result is ready, its transfer device -> host and back are records on a "host_link" track and
its compute a record on a "host" track, and the core waits until its result is back
(`NeuronCore.wait_until`) before the next device partition starts. Its wall time is kept too.

    result = execute(exe, chip, env)                # chip: trnlab.hardware.Device; env: name -> array or Tensor
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from trnlab.compiler.executable import Executable
from trnlab.compiler.lower import Call


@dataclass
class Region:
    """One op's share of the run: the op, its source line, its place on the timeline.

    `start_ns`/`end_ns` is the op's own span (first instruction issued to last result ready); spans
    of neighbouring ops may overlap. `ns` is the time the op *adds* to the run: how far it moves the
    run's end beyond where the ops before it had brought it. The `ns` of all ops sum to the total."""
    name: str                      # "linear.3"
    op: str
    kind: str                      # "kernel" | "host"
    source: str
    start_ns: float
    end_ns: float
    records: list                  # indices of its records in the run's timeline
    ns: float = 0.0
    wall_s: float = 0.0
    kernel: str = ""
    output_bytes: int = 0

    @property
    def span_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass
class Execution:
    env: dict                      # value name -> array (inputs, constants, partition outputs)
    timeline: object               # the run's timeline (core 0), starting at 0
    regions: list = field(default_factory=list)
    wall_s: float = 0.0
    launches: list = field(default_factory=list)   # the hardware Runs, one per device partition


def execute(exe: Executable, chip, env: dict, resident: dict | None = None, timing_only: bool = False) -> Execution:
    """Run `exe` on core 0 of `chip` (a trnlab.hardware.Device). `env`: value name -> array for the
    inputs; `resident`: value name -> Tensor already in the chip's HBM (the weights, bound at load)."""
    resident = resident or {}
    core = chip.cores[0]
    timeline = core.timeline
    base = len(timeline.records)
    origin = core.now
    t_start = time.perf_counter()
    launches, host_regions = [], []
    for i, part in enumerate(exe.partitions):
        if part.kind == "host":
            for call in part.calls:
                t0 = time.perf_counter()
                if call.kind == "view":
                    env[call.output] = env[call.inputs[0]].reshape(call.out_shape)
                    continue
                env[call.output] = _host(call, env, resident)
                host_regions.append((call, time.perf_counter() - t0, _host_times(call, core.now)))
                core.wait_until(host_regions[-1][2][-1])     # the next partition waits for the result
            continue
        args = [resident[n] if n in resident else env[n] for n in part.inputs]
        run = chip.run(part.program, *args, core=0, region=f"part{i}")
        launches.append(run)
        outs = run.outputs if isinstance(run.outputs, (tuple, list)) else (run.outputs,)
        shapes = {c.output: c.out_shape for c in part.calls}
        for value, out in zip(part.outputs, outs):
            env[value] = out if out is None else out.reshape(shapes[value])     # a view's own shape
    wall = time.perf_counter() - t_start
    run_timeline, spans = _shifted(timeline, base, origin)
    host_records = _add_host_records(run_timeline, host_regions, origin)
    # when each device partition's first instruction could start: after its launch's start-up
    starts = [run.start_ns + run.core.spec.launch_start_ns - origin for run in launches]
    regions = _regions(exe, run_timeline, spans, host_regions, host_records, starts)
    run_timeline.regions = [(r.name, min(r.records), max(r.records) + 1) for r in regions if r.records]
    return Execution(env, run_timeline, regions, wall, launches)


def _shifted(timeline, base: int, origin: float):
    """The records from `base` on as a timeline of their own, times relative to `origin` (the run's
    start on the core), and its region spans re-based."""
    out = timeline.shifted(base, origin)
    spans = [(name, first - base, end - base) for name, first, end in timeline.regions if first >= base]
    return out, spans


def _host_times(call: Call, start: float) -> tuple:
    """(start, back on the host, computed, back on the device) in ns, from the call's cost."""
    cost = call.cost or {}
    t1 = start + cost.get("to_host_ns", cost.get("transfer_ns", 0.0))   # an older artifact: one transfer
    t2 = t1 + cost.get("compute_ns", 0.0)
    return start, t1, t2, t2 + cost.get("to_device_ns", 0.0)


def _add_host_records(tl, host_regions, origin: float) -> dict:
    """Append each host op's records to the run's timeline (after the device's; times relative to
    the run's start): its transfer to the host and back on "host_link", its compute on "host".
    Returns id(call) -> its record indices."""
    from trnlab.hardware.records import Record
    if not host_regions:
        return {}
    for engine in ("host_link", "host"):
        if engine not in tl.engines:
            tl.engines.append(engine)
    link, host = tl.engines.index("host_link"), tl.engines.index("host")
    out = {}
    for call, _, (t0, t1, t2, t3) in host_regions:
        t0, t1, t2, t3 = (t - origin for t in (t0, t1, t2, t3))
        cost = call.cost or {}
        first = len(tl.records)
        waited = -1
        steps = ((link, "to_host", t0, t1, f"{cost.get('bytes_to_host', 0)} B device->host"),
                 (host, f"host:{call.op}", t1, t2, call.region),
                 (link, "to_device", t2, t3, f"{cost.get('bytes_to_device', 0)} B host->device"))
        for eid, opcode, s, e, note in steps:
            if e > s or eid == host:         # a transfer that moves nothing is not drawn
                tl.records.append(Record(eid, opcode, s, e, e, 0.0, 0, 0, 0, waited, note))
                waited = len(tl.records) - 1
        out[id(call)] = list(range(first, len(tl.records)))
    return out


def _regions(exe: Executable, tl, spans, host_regions, host_records, starts: list) -> list[Region]:
    """One Region per kernel or host call, in program order, from the replay's region spans.
    `starts`: per device partition, when its first instruction could start; the runtime's start-up
    and tear-down around each launch are no op's (RunProfile.launch_ns)."""
    from trnlab.hardware.timeline import READY, START
    records: dict[str, list] = {}
    for name, first, end in spans:
        parts = name.split("/")
        if len(parts) >= 2:
            records.setdefault(parts[1], []).extend(range(first, end))
    out = []
    frontier = 0.0
    host = {id(call): (wall, times) for call, wall, times in host_regions}
    device_parts = iter(starts)
    for part in exe.partitions:
        if part.kind != "host":
            frontier = max(frontier, next(device_parts, frontier))
        for call in part.calls:
            if call.kind == "view":
                continue
            if call.kind == "host":
                wall, _ = host[id(call)]
                idx = host_records[id(call)]                 # transfers and host compute (compiler.fallback)
                start, end = tl.records[idx[0]][START], tl.records[idx[-1]][READY]
                out.append(Region(call.region, call.op, "host", call.source, start, end, idx,
                                  max(0.0, end - max(frontier, start)), wall))
                frontier = max(frontier, end)
                continue
            idx = sorted(set(records.get(call.region, [])))
            start = min((tl.records[i][START] for i in idx), default=frontier)
            end = max((tl.records[i][READY] for i in idx), default=start)
            nbytes = int(np.prod(call.out_shape)) * _itemsize(call.dtype)
            out.append(Region(call.region, call.op, "kernel", call.source, start, end, idx,
                              max(0.0, end - frontier), 0.0, call.kernel, nbytes))
            frontier = max(frontier, end)
    return out


def _itemsize(dtype: str) -> int:
    from trnlab.hardware import dtypes
    return dtypes.as_dtype({"int64": "int32", "": "float32"}.get(dtype, dtype)).itemsize


def _host(call: Call, env: dict, resident: dict):
    from trnlab.compiler.ops import evaluate, to_numpy, to_torch
    ins = [env[i] if i in env else resident[i].numpy() for i in call.inputs]      # weights: from HBM
    if any(x is None for x in ins):
        raise ValueError(f"host op {call.region} ({call.op}) cannot run in timing-only mode: it needs values")
    return to_numpy(evaluate(call.op, call.attrs, [to_torch(np.asarray(x)) for x in ins]))
