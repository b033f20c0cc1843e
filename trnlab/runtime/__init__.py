"""trnlab.runtime — load a compiled model (or its artifact file) onto a simulated chip and run it.

    from trnlab.runtime import Runtime
    runtime = Runtime("trn2")                   # a thin layer over trnlab.hardware.Device (the chip)
    model = runtime.load("gpt.neff")            # or a CompiledModel, or an Artifact
    run = model.run(idx)                        # NumPy / torch inputs of the compiled shapes
    run.outputs                                 # the model's outputs (torch tensors for torch inputs)
    run.profile.summary(); run.profile.table(); run.profile.advice; run.profile.to_chrome_trace("t.json")

Several models loaded on one Runtime share its chip's HBM. What a loaded model does — constants
resident once, inputs bound per run, the replay of its programs and the profile of the run — is the
compiler's `LoadedModel` (`trnlab/compiler/loaded.py`): the compiler owns what it produces and can
run it (`compiled(x)`) without reaching up to this layer.
"""
from __future__ import annotations

from trnlab.compiler.errors import ArtifactTargetError
from trnlab.compiler.loaded import Chips, LoadedModel, RunResult
from trnlab.compiler.model_profile import Advice, OpProfile, RunProfile

__all__ = ["Runtime", "LoadedModel", "RunResult", "RunProfile", "OpProfile", "Advice"]


class Runtime(Chips):
    """The runtime of a simulated Trainium chip of one target ("trn1", "trn2", "trn3"): loads compiled
    models and artifact files onto its chips (`Chips`: full and timing mode) and launches them on core 0.
    `.chip` is the hardware device (full mode)."""

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
        return f"Runtime({self.target!r})"
