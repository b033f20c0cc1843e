"""What the compiler produces: a lowered graph as programs of the program layer (`Executable`).

A lowered graph (`LoweredGraph`: kernel calls, views, host ops) becomes, once:

- one **partition** per run of consecutive device calls, cut where a host op (the CPU fallback)
  stands; a graph without host ops is ONE partition;
- each device partition traced into ONE `trnlab.hardware.Program` (`nki.trace` of a function that
  calls every kernel of the partition, each inside `nki.region(call.region)`): the kernels are inlined
  into one instruction stream, so the device's engines may start the next op's loads while the
  previous op's matmuls run (overlap across op boundaries), and the profile reads each op's share
  off the same timeline by its region.

The runtime (`trnlab.runtime`) loads an `Executable` onto a device and replays it; the artifact
(`artifact.py`) stores it. Both sit beside or above this module: the compiler owns its output.

    exe = Executable.build(lowered, specs)          # specs: value name -> array or ShapeDtype
    exe = build_executable(lowered, constants)      # the same, specs from the constants and the inputs
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trnlab.compiler.lower import Call, LoweredGraph
from trnlab.hardware import dtypes
from trnlab.nki import ShapeDtype


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
    lowered: LoweredGraph
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
    def build(lowered: LoweredGraph, specs: dict) -> "Executable":
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
                b = part.program.buffers[bid]
                specs[value] = ShapeDtype(tuple(b.shape), b.dtype)
        return Executable(lowered, parts)

    def listing(self, limit: int = 8) -> str:
        lines = [p.describe() for p in self.partitions]
        for p in self.partitions:
            if p.kind == "device":
                lines.append(p.program.listing(limit=limit))
        return "\n".join(lines)


def build_executable(lowered: LoweredGraph, constants: dict) -> Executable:
    """Trace a lowered graph into its device programs (shapes from the constants and the inputs)."""
    specs = {k: ShapeDtype(tuple(v.shape), v.dtype) for k, v in constants.items()}
    for name, shape, dtype in lowered.inputs:
        specs[name] = ShapeDtype(tuple(shape), dtypes.SUPPORTED[dtype])
    return Executable.build(lowered, specs)


def partition(lowered: LoweredGraph) -> list[Partition]:
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
    dtype = "int32" if call.dtype == "int64" else (call.dtype or "float32")
    if dtype not in dtypes.SUPPORTED:              # complex: only host ops read it (compiler.fallback)
        return None
    return ShapeDtype(tuple(call.out_shape), dtypes.SUPPORTED[dtype])


def _kernel(name: str):
    if name == "cast":
        from trnlab.kernels.cast import cast
        return cast
    if name == "decode_attention":                 # serving's decode step (trnlab.serve.steps)
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


def trace_graph(program: LoweredGraph, env: dict, target: str | None = None):
    """The whole lowered graph (device ops only) traced into ONE program: (hardware LoweredGraph, the
    argument arrays in its order, taken from `env`)."""
    if any(c.kind == "host" for c in program.calls):
        raise ValueError("a graph with host ops is several programs (one per device partition): use "
                         "Executable.build(...).programs")
    exe = Executable.build(program, env)
    part = exe.partitions[0]
    return part.program, [env[n] for n in part.inputs]
