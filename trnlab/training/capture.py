"""Capture a training step: forward + backward of `loss = model(x, y)[1]` as ONE joint graph.

AOT Autograd (`aot_export_module(..., trace_joint=True)`) traces the model's forward and, through
autograd, its backward into one FX graph of ATen ops: inputs are the parameters and the batch, outputs
the loss and one gradient per parameter. We keep the ATen ops that have a kernel of their own
(layer norm, GELU, softmax, log-softmax + NLL loss, embedding, and their backward ops) instead of
decomposing them into dozens of element-wise ops, exactly as a backend chooses its decomposition
table; everything else goes to core ATen. The FX graph becomes an `ir.Graph` whose parameters are
runtime *inputs* (they change every step), not constants.

Tied weights (the GPT's lm_head shares the token table) are one parameter: the joint graph names
it twice and gives a gradient under each name; the step sums them.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from trnlab.compiler import capture
from trnlab.compiler.ir import Graph

_KEPT = ("native_layer_norm", "native_layer_norm_backward", "gelu", "gelu_backward", "_softmax",
         "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
         "nll_loss_backward", "embedding_dense_backward")


def decompositions() -> dict:
    """Core ATen decompositions, minus the ops trnlab has kernels for (see the module docstring)."""
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    for name in _KEPT:
        table.pop(getattr(torch.ops.aten, name).default, None)
    return table


class _Loss(torch.nn.Module):
    """model(x, targets) -> (loss,): the function AOT Autograd differentiates."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, idx, targets):
        return (self.model(idx, targets)[1],)


@dataclass
class JointGraph:
    """The captured step: the IR graph and how its inputs and outputs map to the model's parameters."""
    graph: Graph
    param_names: list                 # unique parameters, in model.named_parameters() order
    param_inputs: dict                # parameter name -> [IR input names] (a tied weight has several)
    batch_inputs: list                # IR input names of (idx, targets)
    loss: int                         # position of the loss in graph.outputs
    grads: dict                       # parameter name -> [positions in graph.outputs] (summed if tied)
    seconds: float = 0.0
    ops: dict = field(default_factory=dict)   # ATen op counts of the joint graph


def capture_joint(model: torch.nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> JointGraph:
    """The joint forward + backward graph of `model(idx, targets)[1]` for these shapes."""
    import time
    from torch._functorch.aot_autograd import aot_export_module
    t0 = time.perf_counter()
    wrapper = _Loss(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm, sig = aot_export_module(wrapper, (idx, targets), trace_joint=True, output_loss_index=0,
                                    decompositions=decompositions())
    # the canonical (deduplicated) name of each parameter tensor
    canonical = {}
    for name, p in wrapper.named_parameters(remove_duplicate=False):
        canonical.setdefault(id(p), name)
    alias = {name: canonical[id(p)] for name, p in wrapper.named_parameters(remove_duplicate=False)}
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    spec = {name: ("input", None) for name in placeholders}
    buffers = dict(wrapper.named_buffers(remove_duplicate=False))
    for fx_name, bname in sig.inputs_to_buffers.items():       # buffers (the causal mask) are constants
        spec[fx_name] = ("const", buffers[bname], bname.removeprefix("model.").replace(".", "_"))
    graph = capture.from_fx(gm, spec, name=type(model).__name__ + "_train_step")
    param_inputs: dict = {}
    for fx_name, pname in sig.inputs_to_parameters.items():
        param_inputs.setdefault(alias[pname], []).append(fx_name)
    batch_inputs = list(sig.user_inputs)
    out_nodes = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    out_names = [o.name for o in out_nodes]
    loss = 0                                                    # output_loss_index
    grads: dict = {}
    for fx_name, pname in sig.backward_signature.gradients_to_parameters.items():
        grads.setdefault(alias[pname], []).append(out_names.index(fx_name))
    ops: dict = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and hasattr(n.target, "_schema"):
            ops[str(n.target)] = ops.get(str(n.target), 0) + 1
    names = [canonical[id(p)].removeprefix("model.") for p in dict.fromkeys(
        p for _, p in wrapper.named_parameters(remove_duplicate=False)).keys()]
    param_inputs = {k.removeprefix("model."): v for k, v in param_inputs.items()}
    grads = {k.removeprefix("model."): v for k, v in grads.items()}
    return JointGraph(graph, names, param_inputs, batch_inputs, loss, grads, time.perf_counter() - t0, ops)
