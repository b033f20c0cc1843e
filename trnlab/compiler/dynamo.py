"""`torch.compile(model, backend="trnlab")`: the registered Dynamo backend, forward through AOT Autograd.

This is the shape of AWS's own PyTorch path (TorchDynamo -> AOT Autograd FX graphs -> the Neuron
compiler) [frameworks/torch/pytorch-native-overview]: Dynamo captures the Python, AOT Autograd
traces it to ATen (decomposed to core ATen, the same op set `torch.export` gives), and its forward
graph goes through our passes and lowering like any captured graph. Parameters and buffers, which
Dynamo passes as graph inputs, are taken as constants of the compiled graph (inference: as when Neuron
traces a model; change the weights and you must compile again) — under `torch.no_grad()`. When an input
needs gradients, AOT Autograd's forward and backward graphs both go through the training lowering
(trnlab.training.aot): parameters are runtime inputs, the backward takes the forward's saved tensors,
and `loss.backward()` runs the backward program on the simulated device. A whole step with AdamW fused
in is `trnlab.training.compile_train_step` (notebook 07).
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
    from trnlab.compiler.compiled import CompileOptions, compile_graph
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


def _training_backend(gm, example_inputs, names: list, options: dict):
    """Forward and backward through the training lowering (trnlab.training.aot): parameters are runtime
    inputs (the optimizer changes them), buffers constants; the backward graph takes the forward's
    saved tensors."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from trnlab.training import aot
    defaults = {"autocast": "none", "fallback": False}
    unknown = {k for k, v in options.items() if k != "target" and defaults.get(k, object()) != v}
    if unknown:
        raise CompileError(f"training through torch.compile(backend='trnlab'): options {sorted(unknown)} are not "
                           f"supported (only target=); autocast and fallback are inference-only here", op="options")
    target = options.get("target", "trn2")
    buffers = {i: x for i, (n, x) in enumerate(zip(names, example_inputs)) if "_buffers_" in n}
    shared: dict = {}
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    user_outputs = len(out) if isinstance(out, (tuple, list)) else 1

    def fw_compiler(fw_gm, fw_inputs):
        with unset_fake_temporarily():
            fw_names = [n.name for n in fw_gm.graph.nodes if n.op == "placeholder"]
            constants = {fw_names[i]: x for i, x in buffers.items()}
            # AOT's forward returns the model's outputs first (no input is mutated here), then the saved tensors
            program = aot.compile_phase(fw_gm, "forward", constants, target, name=type(gm).__name__,
                                        user_outputs=user_outputs)
        shared["forward"] = program
        backend.last_training = shared
        return _boxed(program)

    def bw_compiler(bw_gm, bw_inputs):
        with unset_fake_temporarily():
            saved = shared["forward"].saved_constants
            bw_names = [n.name for n in bw_gm.graph.nodes if n.op == "placeholder"]
            program = aot.compile_phase(bw_gm, "backward", {n: saved[n] for n in bw_names if n in saved}, target,
                                        name=type(gm).__name__)
        shared["backward"] = program
        return _boxed(program)

    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                        decompositions=aot.decompositions())(gm, example_inputs)


def _boxed(program):
    from functorch.compile import make_boxed_func

    def run(args):
        out = program(list(args))
        args.clear()
        return out

    run._boxed_call = True
    run.program = program
    return run


backend.last = None
backend.last_training = None     # {'forward': PhaseProgram, 'backward': PhaseProgram}


def register() -> None:
    from torch._dynamo import list_backends, register_backend
    if NAME not in list_backends(exclude_tags=()):
        register_backend(name=NAME)(backend)
    from trnlab.compiler import graph_breaks
    graph_breaks.install()                       # warn when Dynamo hands us no graph or several
