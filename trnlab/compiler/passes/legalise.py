"""Legalise: core ATen ops -> the ops our passes and kernels speak (see `trnlab.compiler.ops`).

One rule per ATen op, each a few lines: `aten.addmm(bias, x, w)` becomes `matmul(x, w)` followed by
`add(·, broadcast(bias))` (so that one fusion rule sees every "matmul then bias"), `aten.view` becomes
`reshape`, `aten.split_with_sizes[i]` a `slice`, ops without inputs (`arange`, `scalar_tensor`,
`full`) become constants. An ATen op without a rule stays as it is: the lowering will refuse it by
name (or run it on the host, with `fallback=True`).
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.ops import decode_arg, evaluate, to_numpy

NAME = "legalise"


def _args(node: Node) -> list:
    """The node's positional arguments: value names for tensors, plain data for the rest."""
    return decode_arg(node.attrs.get("args", []), node.inputs)


def _kwargs(node: Node) -> dict:
    kw = node.attrs.get("kwargs") or {}
    return {k: decode_arg(v, node.inputs) for k, v in kw.items()}


def _set(node: Node, op: str, inputs: list, attrs: dict | None = None) -> None:
    node.op, node.inputs, node.attrs = op, list(inputs), dict(attrs or {})


def _broadcast_to(g: Graph, name: str, shape: tuple, before: Node) -> str:
    """`name` broadcast to `shape` (a new broadcast node), or `name` if it has that shape already."""
    v = g.values[name]
    if tuple(v.shape) == tuple(shape):
        return name
    return g.add_node("broadcast", [name], shape, v.dtype, {"shape": list(shape)}, before.source,
                      name=f"{name}_bcast", before=before).name


def _elementwise(g: Graph, node: Node, op: str) -> bool:
    a, b = _args(node)[:2]
    out = g.values[node.name]
    if not isinstance(b, str):                          # tensor (op) number
        if op == "sub":
            _set(node, "add", [a], {"scalar": -float(b)})
        elif op == "div":
            _set(node, "mul", [a], {"scalar": 1.0 / float(b)})
        else:
            _set(node, op, [a], {"scalar": float(b)})
        return True
    if not isinstance(a, str) or op in ("sub", "div"):
        return False
    if _kwargs(node).get("alpha", 1) != 1:
        return False
    _set(node, op, [_broadcast_to(g, a, out.shape, node), _broadcast_to(g, b, out.shape, node)])
    return True


def _rule(g: Graph, node: Node) -> bool:
    """Rewrite one aten node in place; False if there is no rule (the node stays aten.*)."""
    op = node.op
    args = _args(node)
    out = g.values[node.name]
    x = args[0] if args else None
    if op == "aten.embedding.default":
        _set(node, "embedding", [args[0], args[1]])
    elif op in ("aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor", "aten.div.Tensor"):
        return _elementwise(g, node, op.split(".")[1])
    elif op in ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
                "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
                "aten.flatten.using_ints"):
        _set(node, "reshape", [x], {"shape": list(out.shape)})
    elif op == "aten.permute.default":
        _set(node, "transpose", [x], {"perm": [int(p) % len(out.shape) for p in args[1]]})
    elif op in ("aten.t.default", "aten.transpose.int"):
        rank = len(out.shape)
        d0, d1 = (0, 1) if op == "aten.t.default" else (args[1] % rank, args[2] % rank)
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        _set(node, "transpose", [x], {"perm": perm})
    elif op == "aten.expand.default":
        _set(node, "broadcast", [x], {"shape": list(out.shape)})
    elif op in ("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default"):
        _set(node, "copy", [x])
    elif op in ("aten.split_with_sizes.default", "aten.split.Tensor") and "item" in node.attrs:
        dim = args[2] if len(args) > 2 else 0
        in_shape = g.values[x].shape
        dim %= len(in_shape)
        sizes = args[1] if isinstance(args[1], list) else None
        if sizes is None:
            step = int(args[1])
            sizes = [min(step, in_shape[dim] - s) for s in range(0, in_shape[dim], step)]
        start = sum(sizes[:node.attrs["item"]])
        _set(node, "slice", [x], {"dim": dim, "start": start, "end": start + sizes[node.attrs["item"]]})
    elif op == "aten.slice.Tensor":
        in_shape = g.values[x].shape
        dim = (args[1] if len(args) > 1 else 0) % len(in_shape)
        start = args[2] if len(args) > 2 and args[2] is not None else 0
        end = min(args[3] if len(args) > 3 and args[3] is not None else in_shape[dim], in_shape[dim])
        step = args[4] if len(args) > 4 else 1
        _set(node, "slice", [x], {"dim": dim, "start": int(start), "end": int(end), "step": int(step)})
    elif op == "aten.mm.default":
        _set(node, "matmul", [args[0], args[1]])
    elif op == "aten.bmm.default":
        _set(node, "batch_matmul", [args[0], args[1]])
    elif op == "aten.addmm.default":
        kw = _kwargs(node)
        if kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1:
            return False
        bias, a, b = args[:3]
        mm = g.add_node("matmul", [a, b], out.shape, out.dtype, {}, node.source, name=f"{node.name}_mm", before=node)
        _set(node, "add", [mm.name, _broadcast_to(g, bias, out.shape, node)])
    elif op == "aten.native_layer_norm.default" and node.attrs.get("item") == 0:
        normalized, w, b, eps = args[1], args[2], args[3], args[4]
        if len(normalized) != 1 or w is None or b is None:
            return False
        _set(node, "layer_norm", [x, w, b], {"eps": float(eps)})
    elif op in ("aten._softmax.default", "aten.softmax.int"):
        dim = args[1] % len(out.shape)
        _set(node, "softmax", [x], {"dim": -1 if dim == len(out.shape) - 1 else dim})
    elif op == "aten.gelu.default":
        _set(node, "gelu", [x], {"approximate": _kwargs(node).get("approximate", "none")})
    elif op in ("aten.relu.default", "aten.tanh.default", "aten.sigmoid.default", "aten.silu.default"):
        _set(node, op.split(".")[1], [x])
    elif op in ("aten.bitwise_not.default", "aten.logical_not.default"):
        _set(node, "logical_not", [x])
    elif op == "aten.where.self":
        _set(node, "where", [args[0], args[1], args[2]])
    elif op == "aten._to_copy.default" and "dtype" in (node.attrs.get("kwargs") or {}):
        _set(node, "convert", [x], {"dtype": out.dtype})
    elif op in ("aten.scalar_tensor.default", "aten.arange.start_step", "aten.arange.default", "aten.full.default",
                "aten.zeros.default", "aten.ones.default") and not node.inputs:
        node.op = "constant"                        # made into a value below
    else:
        return False
    return True


def run(g: Graph, options=None) -> Graph:
    for node in list(g.nodes):
        if not node.op.startswith("aten."):
            continue
        original = node.op
        if not _rule(g, node):
            continue
        if node.op == "constant":                   # an op of no inputs: its value, computed once
            value = to_numpy(evaluate(original, node.attrs, []))
            g.nodes.remove(node)
            del g.values[node.name]
            g.add_constant(node.name, np.asarray(value), "const")
    return g
