"""A compiled model on a simulated chip: its constants resident in HBM, inputs bound, replayed, profiled.

Compile once, replay many times: a `LoadedModel` binds the weights and constants once (resident in
the chip's HBM, as `device.tensor(...)`); every `run(*inputs)` binds only the new inputs (int64 ids
narrowed to int32, as Neuron does), replays the executable's program(s) on core 0 (`execute.py`: no
Python tracing) and builds the profile from that one timeline (`model_profile.py`). `timing_only=True`
costs every instruction without computing values (outputs are None).

`compiled(x)` runs here (`CompiledModel.loaded()`), so the compiler can run what it produces without
reaching up to the runtime; `trnlab.runtime.Runtime` (a layer above) adds loading artifact files and
several models on one chip.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnlab.compiler import execute, model_profile
from trnlab.compiler.errors import DynamicShapeError
from trnlab.compiler.executable import Executable, build_executable
from trnlab.compiler.model_profile import RunProfile

TARGETS = ("trn1", "trn2", "trn3")         # neuronx-cc --target


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

    def __init__(self, chips: Chips, graph, program, constants: dict, executable: Executable | None = None):
        self.chips, self.graph, self.program = chips, graph, program          # program: the lowered calls
        self.constants = {k: np.ascontiguousarray(v) for k, v in constants.items()}
        if executable is None:
            executable = build_executable(program, self.constants)
        self.executable = executable
        used = {n for p in executable.partitions for n in p.inputs}
        used |= {i for p in executable.partitions if p.kind == "host" for c in p.calls for i in c.inputs}  # host reads
        self._resident_names = [n for n in self.constants if n in used]
        self.resident_bytes = sum(self.constants[n].nbytes for n in self._resident_names)
        self._resident: dict = {}                  # id(hardware device) -> {name: Tensor in its HBM}
        self._bound(chips.hardware(timing_only=False))

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
        if timing_only:
            env = {name: None for name, _, _ in self.program.inputs}
            as_torch = False
        else:
            env, as_torch = self._bind(inputs)
        chip = self.chips.hardware(timing_only)
        ex = execute.execute(self.executable, chip, env, self._bound(chip), timing_only=timing_only)
        dtype = "bfloat16" if any(c.kind == "kernel" and c.kernel == "cast" for c in self.program.calls) else "float32"
        profile = model_profile.build(ex, self.program, self.graph, self.chips.target, dtype)
        outs = [None if timing_only else ex.env[o] for o in self.program.outputs]
        if as_torch:
            from trnlab.compiler.ops import to_torch
            outs = [to_torch(np.asarray(o)) for o in outs]
        spec = self.program.output_spec
        structured = tuple(None if i is None else outs[i] for i in spec)
        if len(structured) == 1:
            structured = structured[0]
        self.chips.retire_if_long(chip)
        return RunResult(structured, profile, ex.env)


class Chips:
    """The simulated chips a compiled model of one target ("trn1", "trn2", "trn3") runs on: a
    `trnlab.hardware.Device` in full mode (`.chip`) and, for timing-only runs, one in timing mode.

    `cores=1` (default) is one NeuronCore with its share of the chip (HBM bytes and bandwidth), the
    figures `CoreSpec` quotes and `nki.run` uses; `cores=None` is the whole chip."""

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
            from trnlab.hardware.device import Device
            chip = self._chips[mode] = Device(self.target, mode=mode, cores=self.cores, name=f"{self.target}-{mode}")
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
