"""trnlab.compiler — a Neuron-like compiler: PyTorch model -> graph -> visible passes -> kernels -> artifact.

    import trnlab.compiler as tc
    compiled = tc.compile(model, (idx,), target="trn2", autocast="none")   # neuronx-cc's --auto-cast names
    logits, _ = compiled(idx)                     # runs on the simulated Trainium
    print(compiled.explain())                     # passes with their times, memory plan, program listing
    compiled.passes[NAMES.index("fuse")].graph    # the graph after a pass (NAMES: trnlab.compiler.passes.NAMES)
    compiled.save("gpt.neff"); trnlab.runtime.Runtime("trn2").load("gpt.neff").run(idx)

    torch.compile(model, backend="trnlab")        # the same, through Dynamo and AOT Autograd

Modules: `ir` (the graph), `capture` (torch.export / FX -> graph), `passes/` (one module per pass),
`lower` (ops -> kernel calls: a `LoweredGraph`), `executable` (the calls traced into programs: what the
compiler produces), `execute` (its replay on a chip), `model_profile` (the profile of a run), `loaded`
(a compiled model on its chips: `compiled(x)`), `artifact` (the NEFF-like file), `driver` (`compile`:
all of the above in order), `dynamo` (the torch.compile backend).
"""
from trnlab.compiler.driver import TARGETS, CompiledModel, CompileOptions, __version__, compile, dump, explain
from trnlab.compiler.errors import (ArtifactCorruptError, ArtifactError, ArtifactTargetError, ArtifactTruncatedError,
                                    ArtifactVersionError, CompileError, DynamicShapeError)
from trnlab.compiler.executable import Executable, build_executable
from trnlab.compiler.ir import Graph, Node, Value
from trnlab.compiler.lower import SUPPORTED, LoweredGraph

__all__ = ["compile", "explain", "dump", "CompiledModel", "CompileOptions", "Executable", "build_executable",
           "LoweredGraph", "Graph", "Node", "Value", "CompileError",
           "DynamicShapeError", "ArtifactError", "ArtifactCorruptError", "ArtifactTruncatedError",
           "ArtifactVersionError", "ArtifactTargetError", "SUPPORTED", "TARGETS", "__version__"]


def _register_backend() -> None:
    try:
        from trnlab.compiler import dynamo
        dynamo.register()
    except ImportError:           # a torch without Dynamo: compile() still works
        pass


_register_backend()
