"""The one place that runs a lowered program's calls on the simulated NeuronCore.

Today each kernel call is one `nki.run` (the kernel traced once per shape, then replayed on a fresh
one-core device), and the calls run one after another: the program's timeline is the kernels' timelines laid end to end (each shifted by the
end of the one before), with one region per call. Tensors pass between kernels through HBM as NumPy
arrays; views are free (a reshape of the same bytes); host ops run in PyTorch and take no simulated
device time (their wall time is kept). With the program layer, this function becomes "trace the whole
graph once (`nki.trace`, a `nki.region` per call), replay it with `Device.run`": the rest of the runtime
stays.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from trnlab.compiler.lower import Call, Program


@dataclass
class Region:
    """One call's share of the run: the op, its source line, its span on the timeline."""
    name: str                      # "linear.3"
    op: str
    kind: str                      # "kernel" | "host"
    source: str
    start_ns: float
    end_ns: float
    first: int                     # its records in the timeline: [first, last)
    last: int
    wall_s: float
    kernel: str = ""
    output_bytes: int = 0

    @property
    def ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass
class Execution:
    env: dict
    timeline: object
    regions: list = field(default_factory=list)
    wall_s: float = 0.0


def _kernel(name: str):
    if name == "cast":
        from trnlab.kernels.cast import cast
        return cast
    if name == "decode_attention":                 # serving's decode step (trnlab.serve.compiled)
        from trnlab.kernels.decode_attention import decode_attention
        return decode_attention
    from trnlab.kernels import KERNELS
    return KERNELS[name][0]


def _view(value, shape):
    from trnlab.nki import ShapeDtype
    if value is None or shape is None:
        return value
    if isinstance(value, ShapeDtype):
        return ShapeDtype(tuple(shape), value.dtype)
    return value.reshape(shape)


def _dtype(value):
    return value.dtype


def _append(timeline, run_timeline, offset_ns: float) -> None:
    """Append a kernel's records to the program timeline, shifted to start at offset_ns."""
    from trnlab.hardware.timeline import END, READY, START, WAITED
    base = len(timeline.records)
    for r in run_timeline.records:
        r = list(r)
        r[START] += offset_ns
        r[END] += offset_ns
        r[READY] += offset_ns
        if r[WAITED] >= 0:
            r[WAITED] += base
        timeline.records.append(tuple(r))
    timeline._columns = None


def run_calls(program: Program, env: dict, timing_only: bool = False) -> Execution:
    """Run every call of `program` with `env` (value name -> array, inputs and constants bound)."""
    import trnlab.nki as nki
    from trnlab.hardware import Timeline
    from trnlab.hardware.timeline import COMPUTE_ENGINES
    timeline = None
    regions = []
    now = 0.0
    t_start = time.perf_counter()
    for call in program.calls:
        t0 = time.perf_counter()
        if call.kind == "view":
            env[call.output] = _view(env[call.inputs[0]], call.out_shape)
            continue
        if call.kind == "host":
            env[call.output] = _host(call, env)
            regions.append(Region(call.region, call.op, "host", call.source, now, now,
                                  len(timeline.records) if timeline else 0, len(timeline.records) if timeline else 0,
                                  time.perf_counter() - t0))
            continue
        args = [_view(env[i], shape) if i is not None else None for i, shape in zip(call.inputs, call.views)]
        run = nki.run(_kernel(call.kernel), *args, target=program.target, timing_only=timing_only, **call.kwargs)
        out = run.outputs
        if timing_only:
            out = _shape_of(call, env)
        env[call.output] = _view(out, call.out_shape)
        if timeline is None:
            engines = list(run.timeline.engines)
            timeline = Timeline(engines if engines else list(COMPUTE_ENGINES))
        first = len(timeline.records)
        _append(timeline, run.timeline, now)
        latency = run.latency_ns
        nbytes = int(np.prod(call.out_shape)) * (np.dtype(out.dtype).itemsize if hasattr(out, "dtype") else 4)
        regions.append(Region(call.region, call.op, "kernel", call.source, now, now + latency, first,
                              len(timeline.records), time.perf_counter() - t0, call.kernel, nbytes))
        now += latency
    if timeline is None:
        timeline = Timeline(list(COMPUTE_ENGINES))
    return Execution(env, timeline, regions, time.perf_counter() - t_start)


def _shape_of(call: Call, env: dict):
    """The output's ShapeDtype in timing-only mode (no values): from the IR shape and the operand dtype."""
    from trnlab.hardware import dtypes
    from trnlab.nki import ShapeDtype
    first = env[call.inputs[0]]
    dtype = first.dtype
    if call.kernel == "cast":
        dtype = dtypes.SUPPORTED[call.kwargs["dtype"]]
    elif call.kernel == "embedding":
        dtype = env[call.inputs[1]].dtype          # (ids, table): the table's dtype
    return ShapeDtype(tuple(call.out_shape), dtype)


def _host(call: Call, env: dict):
    from trnlab.compiler.ops import evaluate, to_numpy, to_torch
    from trnlab.nki import ShapeDtype
    ins = [env[i] for i in call.inputs]
    if any(isinstance(x, ShapeDtype) for x in ins):
        raise ValueError(f"host op {call.region} ({call.op}) cannot run in timing-only mode: it needs values")
    return to_numpy(evaluate(call.op, call.attrs, [to_torch(x) for x in ins]))


def trace_graph(program: Program, env: dict, target: str | None = None):
    """The whole lowered graph traced into ONE program of the program layer (`nki.trace`), each call
    inside `nki.region(call.region)`: what `run_calls` becomes once the profile reads regions from the
    program (kernels then overlap instead of running end to end). Returns (nki Program, argument
    arrays in its order). Host calls cannot be traced: a graph with a host partition raises ValueError."""
    import trnlab.nki as nki
    if any(c.kind == "host" for c in program.calls):
        raise ValueError("a graph with host ops is several programs (one per device partition); trace_graph "
                         "takes a graph that runs on the device only")
    names = list(program.constants) + [n for n, _, _ in program.inputs]

    def whole(*arrays):
        values = dict(zip(names, arrays))

        def shaped(name, shape):
            x = values[name]
            return x if shape is None or tuple(x.shape) == tuple(shape) else x.reshape(shape)

        for call in program.calls:
            if call.kind == "view":
                values[call.output] = shaped(call.inputs[0], call.out_shape)
                continue
            args = [None if i is None else shaped(i, s) for i, s in zip(call.inputs, call.views)]
            with nki.region(call.region):
                values[call.output] = _kernel(call.kernel)(*args, **call.kwargs)
        return tuple(values[o] for o in program.outputs)

    arrays = [env[n] for n in names]
    return nki.trace(whole, *arrays, target=target or program.target), arrays
