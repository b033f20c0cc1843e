"""trnlab.runtime — load a compiled model (or its artifact file) onto a simulated device and run it.

    from trnlab.runtime import Device
    device = Device("trn2")
    model = device.load("gpt.neff")             # or a CompiledModel, or an Artifact
    run = model.run(idx)                        # NumPy / torch inputs of the compiled shapes
    run.outputs                                 # the model's outputs (torch tensors for torch inputs)
    run.profile.summary(); run.profile.table(); run.profile.advice; run.profile.to_chrome_trace("t.json")

Weights and constants are bound once at load (resident in HBM); `run` binds the inputs (int64 ids
are narrowed to int32, as Neuron does), replays the program's calls (`execute.run_calls`) and builds
the profile. `timing_only=True` costs every instruction without computing values (outputs are None).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnlab.compiler.errors import ArtifactTargetError, DynamicShapeError
from trnlab.runtime import execute
from trnlab.runtime.profile import Advice, OpProfile, RunProfile

__all__ = ["Device", "LoadedModel", "RunResult", "RunProfile", "OpProfile", "Advice"]

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
    """A program with its constants bound on a device: call `run(*inputs)`."""

    def __init__(self, device: "Device", graph, program, constants: dict):
        self.device, self.graph, self.program = device, graph, program
        self.constants = {k: np.ascontiguousarray(v) for k, v in constants.items()}   # resident in HBM
        self.resident_bytes = sum(v.nbytes for v in self.constants.values())

    def _bind(self, inputs) -> tuple[dict, bool]:
        from trnlab.compiler.ops import to_numpy
        import torch
        if len(inputs) != len(self.program.inputs):
            raise TypeError(f"the compiled model takes {len(self.program.inputs)} inputs "
                            f"({[n for n, _, _ in self.program.inputs]}), got {len(inputs)}")
        env = dict(self.constants)
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
        from trnlab.nki import ShapeDtype
        from trnlab.runtime.profile import build
        if timing_only:
            from trnlab.hardware import dtypes
            env = {k: ShapeDtype(v.shape, v.dtype) for k, v in self.constants.items()}
            for name, shape, dtype in self.program.inputs:
                env[name] = ShapeDtype(tuple(shape), dtypes.SUPPORTED[dtype])
            as_torch = False
        else:
            env, as_torch = self._bind(inputs)
        ex = execute.run_calls(self.program, env, timing_only=timing_only)
        dtype = "bfloat16" if any(c.kind == "kernel" and c.kernel == "cast" for c in self.program.calls) else "float32"
        profile = build(ex, self.program, self.graph, self.device.target, dtype)
        outs = [None if timing_only else ex.env[o] for o in self.program.outputs]
        if as_torch:
            from trnlab.compiler.ops import to_torch
            outs = [to_torch(o) for o in outs]
        spec = self.program.output_spec
        structured = tuple(None if i is None else outs[i] for i in spec)
        if len(structured) == 1:
            structured = structured[0]
        return RunResult(structured, profile, ex.env)


class Device:
    """A simulated Trainium device of one target ("trn1", "trn2", "trn3"); programs run on core 0."""

    def __init__(self, target: str = "trn2"):
        if target not in TARGETS:
            raise ValueError(f"target {target!r}: one of {TARGETS}")
        self.target = target

    def load(self, artifact, check_target: bool = True) -> LoadedModel:
        """Load a CompiledModel, an Artifact or an artifact file."""
        from trnlab.compiler import artifact as art
        if isinstance(artifact, (str, bytes)) or hasattr(artifact, "__fspath__"):
            artifact = art.load(artifact, target=self.target if check_target else None)
        if artifact.program.target != self.target and check_target:
            raise ArtifactTargetError(
                f"target: the artifact was compiled for {artifact.program.target}, this device is {self.target}; "
                f"recompile with target={self.target!r}", part="manifest.target")
        return LoadedModel(self, artifact.graph, artifact.program, artifact.constants)

    def __repr__(self) -> str:
        return f"Device({self.target!r})"
