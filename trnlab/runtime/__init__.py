"""trnlab.runtime — load a compiled model (or its artifact file) onto a simulated device and run it.

    from trnlab.runtime import Device
    device = Device("trn2")                     # a thin layer over trnlab.hardware.Device (the chip)
    model = device.load("gpt.neff")             # or a CompiledModel, or an Artifact
    run = model.run(idx)                        # NumPy / torch inputs of the compiled shapes
    run.outputs                                 # the model's outputs (torch tensors for torch inputs)
    run.profile.summary(); run.profile.table(); run.profile.advice; run.profile.to_chrome_trace("t.json")

Compile once, replay many times: `load` binds the weights and constants once (resident in the chip's
HBM, as `device.tensor(...)`); every `run(*inputs)` binds only the new inputs (int64 ids narrowed to
int32, as Neuron does) and replays the traced program(s) on core 0 (`execute.execute`: no Python
tracing) and builds the profile from that one timeline. `timing_only=True` costs every instruction
without computing values (outputs are None). Several models loaded on one Device share its HBM.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnlab.compiler.errors import ArtifactTargetError, DynamicShapeError
from trnlab.runtime import execute
from trnlab.runtime.execute import Executable
from trnlab.runtime.profile import Advice, OpProfile, RunProfile

__all__ = ["Device", "LoadedModel", "RunResult", "RunProfile", "OpProfile", "Advice", "build_executable"]

TARGETS = ("trn1", "trn2", "trn3")


@dataclass
class RunResult:
    outputs: object
    profile: RunProfile
    env: dict

    @property
    def advice(self) -> list:
        return self.profile.advice


class LoadedModel:
    """A compiled model on a device: its programs, its constants resident in HBM; call `run(*inputs)`."""

    def __init__(self, device: "Device", graph, program, constants: dict, executable: Executable | None = None):
        self.device, self.graph, self.program = device, graph, program        # program: the lowered calls
        self.constants = {k: np.ascontiguousarray(v) for k, v in constants.items()}
        if executable is None:
            executable = build_executable(program, self.constants)
        self.executable = executable
        used = {n for p in executable.partitions for n in p.inputs}
        used |= {i for p in executable.partitions if p.kind == "host" for c in p.calls for i in c.inputs}  # host reads
        self._resident_names = [n for n in self.constants if n in used]
        self.resident_bytes = sum(self.constants[n].nbytes for n in self._resident_names)
        self._resident: dict = {}                  # id(hardware device) -> {name: Tensor in its HBM}
        self._bound(device.hardware(timing_only=False))

    @property
    def programs(self) -> list:
        """The traced programs the device replays (one per device partition; one without host ops)."""
        return self.executable.programs

    def _bound(self, chip) -> dict:
        """The constants as tensors of `chip`'s HBM, bound once per hardware device."""
        key = id(chip)
        if key not in self._resident:
            self._resident = {k: v for k, v in self._resident.items() if v[0] is not None and v[0]() is not None}
            import weakref
            tensors = {n: chip.tensor(self.constants[n], name=n) for n in self._resident_names}
            self._resident[key] = (weakref.ref(chip), tensors)
        return self._resident[key][1]

    def _bind(self, inputs) -> tuple[dict, bool]:
        from trnlab.compiler.ops import to_numpy
        import torch
        if len(inputs) != len(self.program.inputs):
            raise TypeError(f"the compiled model takes {len(self.program.inputs)} inputs "
                            f"({[n for n, _, _ in self.program.inputs]}), got {len(inputs)}")
        env = {}
        as_torch = False
        for x, (name, shape, dtype) in zip(inputs, self.program.inputs):
            if isinstance(x, torch.Tensor):
                as_torch = True
                x = to_numpy(x)
            x = np.asarray(x)
            if list(x.shape) != list(shape):
                raise DynamicShapeError(
                    f"input shape: {name} was compiled as {list(shape)}, called with {list(x.shape)}; Neuron "
                    f"compiles one graph per input shape: compile one for this shape too (a bucket)", op=name)
            if dtype == "int32" and x.dtype == np.int64:
                x = x.astype(np.int32)
            env[name] = x
        return env, as_torch

    def run(self, *inputs, timing_only: bool = False) -> RunResult:
        from trnlab.runtime.profile import build
        if timing_only:
            env = {name: None for name, _, _ in self.program.inputs}
            as_torch = False
        else:
            env, as_torch = self._bind(inputs)
        chip = self.device.hardware(timing_only)
        ex = execute.execute(self.executable, chip, env, self._bound(chip), timing_only=timing_only)
        dtype = "bfloat16" if any(c.kind == "kernel" and c.kernel == "cast" for c in self.program.calls) else "float32"
        profile = build(ex, self.program, self.graph, self.device.target, dtype)
        outs = [None if timing_only else ex.env[o] for o in self.program.outputs]
        if as_torch:
            from trnlab.compiler.ops import to_torch
            outs = [to_torch(np.asarray(o)) for o in outs]
        spec = self.program.output_spec
        structured = tuple(None if i is None else outs[i] for i in spec)
        if len(structured) == 1:
            structured = structured[0]
        self.device.retire_if_long(chip)
        return RunResult(structured, profile, ex.env)


def build_executable(program, constants: dict) -> Executable:
    """Trace a lowered program into its device programs (shapes from the constants and the inputs)."""
    from trnlab.hardware import dtypes
    from trnlab.nki import ShapeDtype
    specs = {k: ShapeDtype(tuple(v.shape), v.dtype) for k, v in constants.items()}
    for name, shape, dtype in program.inputs:
        specs[name] = ShapeDtype(tuple(shape), dtypes.SUPPORTED[dtype])
    return Executable.build(program, specs)


class Device:
    """A simulated Trainium chip of one target ("trn1", "trn2", "trn3"): a thin layer over
    `trnlab.hardware.Device` that loads compiled models and launches them on core 0.

    `cores=1` (default) is one NeuronCore with its share of the chip (HBM bytes and bandwidth), the
    figures `CoreSpec` quotes and `nki.run` uses; `cores=None` is the whole chip. `.chip` is the
    hardware device (full mode); timing-only runs use a second one in timing mode (`hardware(True)`)."""

    MAX_RECORDS = 400_000          # a hardware device whose core 0 has recorded more is replaced (memory)

    def __init__(self, target: str = "trn2", cores: int | None = 1):
        if target not in TARGETS:
            raise ValueError(f"target {target!r}: one of {TARGETS}")
        self.target = target
        self.cores = cores
        self._chips: dict = {}
        self.chip = self.hardware(timing_only=False)

    def hardware(self, timing_only: bool = False):
        """The trnlab.hardware.Device that runs this device's programs (full or timing mode)."""
        mode = "timing" if timing_only else "full"
        chip = self._chips.get(mode)
        if chip is None:
            from trnlab.hardware.device import Device as Chip
            chip = self._chips[mode] = Chip(self.target, mode=mode, cores=self.cores, name=f"{self.target}-{mode}")
            if mode == "full":
                self.chip = chip
        return chip

    def retire_if_long(self, chip) -> None:
        """Start a fresh hardware device once one has recorded MAX_RECORDS (loaded models rebind their
        constants on it at their next run): runs are independent, the timeline need not grow forever."""
        if len(chip.cores[0].timeline.records) > self.MAX_RECORDS:
            mode = chip.mode
            self._chips.pop(mode, None)
            self.hardware(mode == "timing")

    def load(self, artifact, check_target: bool = True) -> LoadedModel:
        """Load a CompiledModel, an Artifact or an artifact file."""
        from trnlab.compiler import artifact as art
        if isinstance(artifact, (str, bytes)) or hasattr(artifact, "__fspath__"):
            artifact = art.load(artifact, target=self.target if check_target else None)
        if artifact.program.target != self.target and check_target:
            raise ArtifactTargetError(
                f"target: the artifact was compiled for {artifact.program.target}, this device is {self.target}; "
                f"recompile with target={self.target!r}", part="manifest.target")
        return LoadedModel(self, artifact.graph, artifact.program, artifact.constants,
                           getattr(artifact, "executable", None))

    def __repr__(self) -> str:
        return f"Device({self.target!r})"
