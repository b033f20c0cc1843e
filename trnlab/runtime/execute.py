"""The one place that turns a lowered graph into programs of the program layer and replays them.

A lowered graph (`lower.Program`: kernel calls, views, host ops) becomes, once:

- one **partition** per run of consecutive device calls, cut where a host op (the CPU fallback)
  stands; a graph without host ops is ONE partition;
- each device partition traced into ONE `trnlab.hardware.Program` (`nki.trace` of a function that
  calls every kernel of the partition, each inside `nki.region(call.region)`): the kernels are inlined
  into one instruction stream, so the device's engines may start the next op's loads while the
  previous op's matmuls run (overlap across op boundaries), and the profile reads each op's share
  off the same timeline by its region.

A run (`execute`) replays the partitions in order on core 0 of a `trnlab.hardware.Device` (no Python
tracing: a replay costs one method call per instruction), runs the host ops in PyTorch in between
(they take no simulated device time; their wall time is kept) and gives the run's timeline, shifted
to start at 0, with one `Region` per op.

    exe = Executable.build(lowered, specs)          # specs: value name -> array or ShapeDtype
    result = execute(exe, chip, env)                # chip: trnlab.hardware.Device; env: name -> array or Tensor
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from trnlab.compiler.lower import Call, Program


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
class Partition:
    """Consecutive calls that run on one side of a partition boundary."""
    kind: str                      # "device" | "host"
    calls: list                    # [Call]
    inputs: list = field(default_factory=list)    # device: value names, in the program's argument order
    outputs: list = field(default_factory=list)   # device: value names it returns (needed later)
    program: object = None         # device: the trnlab.hardware.Program

    def describe(self) -> str:
        if self.kind == "host":
            return f"host partition: {', '.join(c.region for c in self.calls)}  [CPU]"
        return (f"device partition: {sum(c.kind == 'kernel' for c in self.calls)} kernels -> program "
                f"{self.program.name!r} ({len(self.program.instructions)} instructions, "
                f"{len(self.program.buffers)} buffers); args {len(self.inputs)}, returns {self.outputs}")


@dataclass
class Executable:
    """A lowered graph as programs: what the runtime loads onto a core and the artifact stores."""
    lowered: Program
    partitions: list

    @property
    def programs(self) -> list:
        """The device programs (one per device partition), in run order."""
        return [p.program for p in self.partitions if p.kind == "device"]

    @property
    def program(self):
        """The one program of a graph that runs on the device only."""
        programs = self.programs
        if len(programs) != 1:
            raise ValueError(f"this graph has {len(programs)} device partitions (host ops between them): "
                             f"use .programs")
        return programs[0]

    @staticmethod
    def build(lowered: Program, specs: dict) -> "Executable":
        """Cut the calls into partitions and trace each device partition (`specs`: value name ->
        array or ShapeDtype for the constants and the inputs; host outputs from the IR shapes)."""
        parts = partition(lowered)
        specs = dict(specs)
        for i, part in enumerate(parts):
            if part.kind == "host":
                for c in part.calls:
                    specs[c.output] = _host_spec(c)
                continue
            name = "graph" if len(parts) == 1 else f"graph.part{i}"
            part.program = trace_partition(part, specs, lowered.target, name)
            for value, bid in zip(part.outputs, _output_ids(part.program)):
                from trnlab.nki import ShapeDtype
                b = part.program.buffers[bid]
                specs[value] = ShapeDtype(tuple(b.shape), b.dtype)
        return Executable(lowered, parts)

    def listing(self, limit: int = 8) -> str:
        lines = [p.describe() for p in self.partitions]
        for p in self.partitions:
            if p.kind == "device":
                lines.append(p.program.listing(limit=limit))
        return "\n".join(lines)


def partition(lowered: Program) -> list[Partition]:
    """The calls cut at every change between device and host (views go with the calls around them)."""
    parts: list[Partition] = []
    for call in lowered.calls:
        kind = "host" if call.kind == "host" else "device"
        if call.kind == "view" and parts:
            kind = parts[-1].kind
        if not parts or parts[-1].kind != kind:
            parts.append(Partition(kind, []))
        parts[-1].calls.append(call)
    # what each device partition takes and returns
    needed_after: set = set(lowered.outputs)
    for part in reversed(parts):
        produced = {c.output for c in part.calls}
        read = []
        for c in part.calls:
            for i in c.inputs:
                if i is not None and i not in produced and i not in read:
                    read.append(i)
        if part.kind == "device":
            part.inputs = read
            part.outputs = [c.output for c in part.calls if c.output in needed_after]
        needed_after |= set(read)
    return parts


def trace_partition(part: Partition, specs: dict, target: str, name: str = "graph"):
    """ONE program for the partition's calls: each kernel inlined inside `nki.region(call.region)`."""
    import trnlab.nki as nki
    names = list(part.inputs)

    def whole(*arrays):
        values = dict(zip(names, arrays))

        def shaped(value, shape):
            x = values[value]
            return x if shape is None or tuple(x.shape) == tuple(shape) else x.reshape(tuple(shape))

        for call in part.calls:
            if call.kind == "view":
                values[call.output] = shaped(call.inputs[0], call.out_shape)
                continue
            args = [None if i is None else shaped(i, s) for i, s in zip(call.inputs, call.views)]
            kwargs = dict(call.kwargs)
            if kwargs.get("residual") is True:           # the last input is the kernel's residual=
                kwargs["residual"] = args.pop()
            with nki.region(call.region):
                values[call.output] = _kernel(call.kernel)(*args, **kwargs)
        return tuple(values[o] for o in part.outputs)

    whole.__name__ = name
    program = nki.trace(whole, *[specs[n] for n in names], target=target)
    # the arguments carry the graph's value names (the traced function takes *arrays)
    program.inputs = [(value, bid) for value, (_, bid) in zip(names, program.inputs)]
    for value, bid in program.inputs:
        program.buffers[bid].name = value
    program.name = name
    return program


def _output_ids(program) -> list[int]:
    outs = program.outputs
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return [o["buffer"] for o in outs]


def _host_spec(call: Call):
    from trnlab.hardware import dtypes
    from trnlab.nki import ShapeDtype
    dtype = "int32" if call.dtype == "int64" else (call.dtype or "float32")
    if dtype not in dtypes.SUPPORTED:              # complex: only host ops read it (compiler.fallback)
        return None
    return ShapeDtype(tuple(call.out_shape), dtypes.SUPPORTED[dtype])


@dataclass
class Execution:
    env: dict                      # value name -> array (inputs, constants, partition outputs)
    timeline: object               # the run's timeline (core 0), starting at 0
    regions: list = field(default_factory=list)
    wall_s: float = 0.0
    launches: list = field(default_factory=list)   # the hardware Runs, one per device partition


def _kernel(name: str):
    if name == "cast":
        from trnlab.kernels.cast import cast
        return cast
    if name == "decode_attention":                 # serving's decode step (trnlab.serve.compiled)
        from trnlab.kernels.decode_attention import decode_attention
        return decode_attention
    if name == "causal_attention_qkv_packed":
        from trnlab.kernels.attention_packed import causal_attention_qkv_packed
        return causal_attention_qkv_packed
    if name == "layer_norm_linear":
        from trnlab.kernels.fused import layer_norm_linear
        return layer_norm_linear
    if "." in name:                                # "module.function" of trnlab.kernels (compiler.lower_nn)
        import importlib
        module, function = name.rsplit(".", 1)
        return getattr(importlib.import_module(f"trnlab.kernels.{module}"), function)
    from trnlab.kernels import KERNELS
    return KERNELS[name][0]


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
                host_regions.append((len(launches), call, time.perf_counter() - t0))
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
    regions = _regions(exe, run_timeline, spans, host_regions, launches)
    run_timeline.regions = [(r.name, min(r.records), max(r.records) + 1) for r in regions if r.records]
    return Execution(env, run_timeline, regions, wall, launches)


def _shifted(timeline, base: int, origin: float):
    """The records from `base` on as a timeline of their own, times relative to `origin` (the run's
    start on the core), and its region spans re-based."""
    from trnlab.hardware import Timeline
    from trnlab.hardware.timeline import END, NOTE, READY, START, WAITED
    assert (START, END, READY, WAITED, NOTE) == (2, 3, 4, 9, 10)     # the record layout unpacked below
    out = Timeline(list(timeline.engines), timeline.name)
    out.records = [(e, op, s - origin, end - origin, ready - origin, f, h, sb, ps,
                    (w - base if w >= base else -1) if w >= 0 else w, note)
                   for e, op, s, end, ready, f, h, sb, ps, w, note in timeline.records[base:]]
    spans = [(name, first - base, end - base) for name, first, end in timeline.regions if first >= base]
    return out, spans


def _regions(exe: Executable, tl, spans, host_regions, launches) -> list[Region]:
    """One Region per kernel or host call, in program order, from the replay's region spans."""
    from trnlab.hardware.timeline import READY, START
    records: dict[str, list] = {}
    for name, first, end in spans:
        parts = name.split("/")
        if len(parts) >= 2:
            records.setdefault(parts[1], []).extend(range(first, end))
    out = []
    frontier = 0.0
    host = {id(call): (k, wall) for k, call, wall in host_regions}
    for part in exe.partitions:
        for call in part.calls:
            if call.kind == "view":
                continue
            if call.kind == "host":
                _, wall = host[id(call)]
                ns = call.cost.get("total_ns", 0.0)          # transfers and host compute (compiler.fallback)
                out.append(Region(call.region, call.op, "host", call.source, frontier, frontier + ns, [], ns, wall))
                frontier += ns
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


def trace_graph(program: Program, env: dict, target: str | None = None):
    """The whole lowered graph (device ops only) traced into ONE program: (hardware Program, the
    argument arrays in its order, taken from `env`)."""
    if any(c.kind == "host" for c in program.calls):
        raise ValueError("a graph with host ops is several programs (one per device partition): use "
                         "Executable.build(...).programs")
    exe = Executable.build(program, env)
    part = exe.partitions[0]
    return part.program, [env[n] for n in part.inputs]
