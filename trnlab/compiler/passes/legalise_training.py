"""Legalise for training graphs: the backward ATen ops (and the loss) -> the ops of trnlab's kernels.

Runs after `legalise` on a joint forward + backward graph (trnlab.training.capture). One rule per
ATen op, each naming the kernel it will become:

    native_layer_norm_backward[i](dy, x, [C], mean, rstd, w, b, mask)  -> layer_norm_backward(x, w, dy)[i]
                                               (the kernel recomputes mean and rstd from x: nothing saved)
    gelu_backward(dy, x)                       -> gelu_backward(x, dy, approximate=)
    _softmax_backward_data(dy, y, dim)         -> softmax_backward(y, dy)
    nll_loss_forward(_log_softmax(z), t)[0]    -> cross_entropy(z, t)        (mean, ignore_index)
    _log_softmax_backward_data(nll_loss_backward(g, _log_softmax(z), t), ·) -> cross_entropy_backward(z, t, g)
        (in a backward graph alone, z or log_softmax(z) is a saved input: the same kernel, same result)
    embedding_dense_backward(dy, ids, V)       -> embedding_backward(ids, dy, num_embeddings=V)
    sum.dim_IntList(x, dims, keepdim)          -> sum(x, dims=, keepdim=)     (bias gradients)
    cat(xs, dim)                               -> concat(*xs, dim=)           (the q, k, v gradients)
    full_like(x, value)                        -> a constant                  (d loss / d loss = 1)

The log-softmax itself and layer norm's saved mean and rstd are then read by nobody and `fold`
removes them: the step saves only what its kernels read.
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.passes.legalise import _args, _kwargs, _set

NAME = "legalise_training"


def _producer(g: Graph, name: str) -> Node | None:
    """The node that makes `name`, looking through copies (ATen's alias/detach/clone)."""
    node = g.node(name) if isinstance(name, str) else None
    while node is not None and node.op == "copy":
        node = g.node(node.inputs[0])
    return node


def _saved(g: Graph, name: str) -> str | None:
    """`name` if it is a graph input (a saved tensor of AOT Autograd's backward graph), looking through
    copies; else None."""
    node = g.node(name) if isinstance(name, str) else None
    while node is not None and node.op == "copy":
        name = node.inputs[0]
        node = g.node(name)
    return name if node is None and name in g.inputs else None


def _rule(g: Graph, node: Node) -> bool:
    op = node.op
    args = _args(node)
    out = g.values[node.name]
    if op == "aten.native_layer_norm_backward.default" and "item" in node.attrs:
        grad, x, normalized, _mean, _rstd, w, b = args[:7]
        if len(normalized) != 1 or w is None or b is None:
            return False
        eps = 1e-5
        for n in g.nodes:                                   # the forward layer norm of the same x and w: its eps
            if n.op == "layer_norm" and n.inputs[:2] == [x, w]:
                eps = n.attrs.get("eps", eps)
        _set(node, "layer_norm_backward", [x, w, grad], {"eps": eps, "item": node.attrs["item"]})
    elif op == "aten.gelu_backward.default":
        grad, x = args[:2]
        _set(node, "gelu_backward", [x, grad], {"approximate": _kwargs(node).get("approximate", "none")})
    elif op == "aten._softmax_backward_data.default":
        grad, y, dim = args[:3]
        if dim % len(out.shape) != len(out.shape) - 1:
            return False
        _set(node, "softmax_backward", [y, grad])
    elif op == "aten.nll_loss_forward.default" and node.attrs.get("item") == 0:
        logp, target, weight, reduction, ignore = args[:5]
        source = _producer(g, logp)
        if weight is not None or reduction != 1 or source is None or source.op != "aten._log_softmax.default":
            return False
        logits = _args(source)[0]
        if len(g.values[logits].shape) != 2:
            return False
        _set(node, "cross_entropy", [logits, target], {"ignore_index": int(ignore)})
    elif op == "aten._log_softmax_backward_data.default":
        grad, logp = args[:2]
        nll = _producer(g, grad)
        source = _producer(g, logp)
        if nll is None or nll.op != "aten.nll_loss_backward.default":
            return False
        if source is not None and source.op == "aten._log_softmax.default":
            logits = _args(source)[0]
        elif source is None and _saved(g, logp) and len(g.values[_saved(g, logp)].shape) == 2:
            # AOT Autograd's separate backward graph: the forward's saved tensor is an input. Softmax is
            # blind to a constant added to a row, so softmax(log_softmax(z)) = softmax(z): the kernel
            # takes the saved log-probabilities (or the logits, trnlab.training.aot saves those) as they are.
            logits = _saved(g, logp)
        else:
            return False
        grad_loss, _, target, weight, reduction, ignore = _args(nll)[:6]
        if weight is not None or reduction != 1:
            return False
        _set(node, "cross_entropy_backward", [logits, target, grad_loss], {"ignore_index": int(ignore)})
    elif op == "aten.embedding_dense_backward.default":
        grad, ids, num_weights, padding_idx, scale = args[:5]
        if padding_idx not in (-1, None) or scale:
            return False
        _set(node, "embedding_backward", [ids, grad], {"num_embeddings": int(num_weights)})
    elif op == "aten.sum.dim_IntList":
        x, dims = args[0], args[1]
        keepdim = bool(args[2]) if len(args) > 2 else bool(_kwargs(node).get("keepdim", False))
        if _kwargs(node).get("dtype") is not None:
            return False
        rank = len(g.values[x].shape)
        _set(node, "sum", [x], {"dims": sorted(int(d) % rank for d in dims), "keepdim": keepdim})
    elif op == "aten.cat.default":
        xs = args[0]
        dim = args[1] if len(args) > 1 else 0
        _set(node, "concat", list(xs), {"dim": int(dim) % len(out.shape)})
    elif op == "aten.full_like.default":
        value = float(args[1])
        g.nodes.remove(node)
        del g.values[node.name]
        g.add_constant(node.name, np.full(out.shape, value, dtype=out.dtype), "const")
    else:
        return False
    return True


def run(g: Graph, options=None) -> Graph:
    for node in list(g.nodes):
        if node.op.startswith("aten."):
            _rule(g, node)
    return g
