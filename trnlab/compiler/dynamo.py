"""`torch.compile(model, backend="trnlab")`: the registered Dynamo backend, forward through AOT Autograd.

This is the shape of AWS's own PyTorch path (TorchDynamo -> AOT Autograd FX graphs -> the Neuron
compiler) [frameworks/torch/pytorch-native-overview]: Dynamo captures the Python, AOT Autograd
traces it to ATen (decomposed to core ATen, the same op set `torch.export` gives), and its forward
graph goes through our passes and lowering like any captured graph. Parameters and buffers, which
Dynamo passes as graph inputs, are taken as constants of the compiled graph (inference: as when Neuron
traces a model; change the weights and you must compile again) — under `torch.no_grad()`. When an input
needs gradients, AOT Autograd's forward and backward graphs both go through the training lowering
(trnlab.training.aot, which lends it here when imported: training sits above the compiler):
parameters are runtime inputs, the backward takes the forward's saved tensors,
and `loss.backward()` runs the backward program on the simulated device. A whole step with AdamW fused
in is `trnlab.training.compile_train_step` (notebook 07). Running a compiled forward needs the runtime
(`import trnlab.runtime`), which also sits above the compiler.
"""
from __future__ import annotations

import torch

from trnlab.compiler.errors import CompileError

NAME = "trnlab"
_options: dict = {}


def configure(**options) -> None:
    """Options for the next torch.compile(..., backend="trnlab") calls (target=, autocast=, fallback=)."""
    _options.clear()
    _options.update(options)


def _is_weight(name: str) -> bool:
    return "_parameters_" in name or "_buffers_" in name


def _clean(name: str) -> str:
    """'L_self_modules_blocks_modules_0_modules_ln_1_parameters_weight_' -> 'blocks_0_ln_1_weight'."""
    name = name.lower().replace("l_self_", "", 1)
    for part in ("modules_", "parameters_", "buffers_"):
        name = name.replace(part, "")
    return name.strip("_")


def backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd
    from trnlab.compiler import capture
    from trnlab.compiler.driver import CompileOptions, compile_graph
    from trnlab.compiler import graph_breaks
    graph_breaks.graph_received()
    options = {**_options, **(kwargs.get("options") or {})}
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    weights = [_is_weight(n) for n in names]
    for name, x in zip(names, example_inputs):
        if not isinstance(x, torch.Tensor):
            raise CompileError(f"dynamic shape or non-tensor input {name} ({type(x).__name__}): Neuron compiles one "
                               f"graph per input shape; compile with static shapes (torch.compile(dynamic=False))",
                               op=name)

    def fw_compiler(fw_gm: torch.fx.GraphModule, fw_inputs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():           # AOT traces with fake tensors; we compute real constants
            return _compile_forward(fw_gm)

    def _compile_forward(fw_gm: torch.fx.GraphModule):
        fw_names = [n.name for n in fw_gm.graph.nodes if n.op == "placeholder"]
        placeholders = {}
        for i, name in enumerate(fw_names):
            if i < len(weights) and weights[i]:
                placeholders[name] = ("param", example_inputs[i], _clean(names[i]))
            else:
                placeholders[name] = ("input", None)
        graph = capture.from_fx(fw_gm, placeholders, name=type(gm).__name__)
        compiled = compile_graph(graph, CompileOptions(**options))
        user = [i for i, name in enumerate(fw_names) if placeholders[name][0] == "input"]

        def run(*args):
            args = args[0] if len(args) == 1 and isinstance(args[0], list) else args
            result = compiled.run(*[args[i] for i in user])
            return [torch.as_tensor(result.env[o]) if not isinstance(result.env[o], torch.Tensor) else result.env[o]
                    for o in compiled.program.outputs]

        run.compiled = compiled
        backend.last = compiled
        return run

    training = torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                               for x in example_inputs)
    if not training:
        return aot_autograd(fw_compiler=fw_compiler, decompositions=capture.decompositions(dict(core_aten_decompositions())))(gm, example_inputs)
    return _training_backend(gm, example_inputs, names, options)


# The training lowering (trnlab.training, a layer above) lends the backend its forward-and-backward
# path when it is imported: (gm, example_inputs, names, options) -> AOT Autograd's compiled function.
_training = None


def use_training(backend_for_gradients) -> None:
    """Called by trnlab.training.aot when it is imported (the compiler never imports training)."""
    global _training
    _training = backend_for_gradients


def _lend_training_from_the_package() -> None:
    """The training layer lends its gradient path through the package's entry point (pyproject.toml,
    group "trnlab.gradient_path"): loading it imports `trnlab.training.aot`, which calls `use_training`.
    So `torch.compile(backend="trnlab")` trains without the student importing trnlab.training, and the
    compiler still imports nothing above it."""
    from importlib.metadata import entry_points
    for entry in entry_points(group="trnlab.gradient_path"):
        entry.load()


def _training_backend(gm, example_inputs, names: list, options: dict):
    if _training is None:
        _lend_training_from_the_package()
    if _training is None:
        raise CompileError("torch.compile(backend='trnlab') with inputs that need gradients uses the training "
                           "lowering (trnlab.training, a layer above the compiler), which the installed package lends through "
                           "its entry point: none was found — install the package (pip install -e .) or "
                           "import trnlab.training first", op="training")
    return _training(gm, example_inputs, names, options)


backend.last = None
backend.last_training = None     # {'forward': PhaseProgram, 'backward': PhaseProgram}


def register() -> None:
    from torch._dynamo import list_backends, register_backend
    if NAME not in list_backends(exclude_tags=()):
        register_backend(name=NAME)(backend)
    from trnlab.compiler import graph_breaks
    graph_breaks.install()                       # warn when Dynamo hands us no graph or several
