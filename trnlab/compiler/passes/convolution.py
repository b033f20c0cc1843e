"""Convolution layout: each `conv2d` becomes windows gathered by DMA and ONE matmul, channels-last.

The Tensor engine multiplies matrices; the Neuron compiler turns a convolution into matmuls over
shifted windows of the input. This pass makes that choice visible in the graph:

    %conv : f32[N, O, Ho, Wo] = conv2d(%x, %w, %b, stride=.., padding=..)
becomes
    %x_nhwc  : f32[N, H, W, C]         = transpose(%x, perm=[0, 2, 3, 1])      channels-last: a pixel's C
    %x_cols  : f32[N*Ho*Wo, kh*kw*C]   = im2col(%x_nhwc, kernel_size=.., ...)   channels are contiguous
    %conv_mm : f32[N*Ho*Wo, O]         = matmul(%x_cols, %w_matrix)            w as [kh*kw*C, O], stored once
    ... add(broadcast(%b)), reshape [N, Ho, Wo, O], transpose(perm=[0, 3, 1, 2]) back to NCHW

so `fuse` sees "matmul then bias" and makes it one `linear` (the bias, and a following ReLU, ride on
the PSUM evacuation). A 1x1 convolution of stride 1 needs no windows: the NHWC tensor viewed as
[N*H*W, C] is already the matrix. Grouped convolutions (groups > 1, depthwise) use a block-diagonal
weight matrix: the zeros cost Tensor-engine time, the matmul stays one instruction stream. Pooling
takes the same layout: `max_pool2d`/`avg_pool2d` -> transpose, `pool2d` (NHWC), transpose back.

Then the layout's transposes are moved down through element-wise ops (ReLU, batch norm's scale and
shift, a residual add) and a transpose followed by its inverse is removed: between two convolutions
the activations stay NHWC. `graph.meta["pass_stats"]["convolution"]` counts what the pass did.
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.ops import ACTIVATIONS, UNARY

NAME = "convolution"
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
ELEMENTWISE = ("add", "mul", "sub", "div", "maximum")


def weight_matrix(w: np.ndarray, groups: int) -> np.ndarray:
    """w [O, C/g, kh, kw] -> [kh*kw*C, O] with rows in (i, j, c) order (im2col's columns); block-diagonal
    over the groups (an output channel reads only its group's input channels)."""
    O, Cg, kh, kw = w.shape
    C = Cg * groups
    full = np.zeros((kh, kw, C, O), dtype=w.dtype)
    per = O // groups
    for gi in range(groups):
        block = w[gi * per:(gi + 1) * per]                                  # [per, Cg, kh, kw]
        full[:, :, gi * Cg:(gi + 1) * Cg, gi * per:(gi + 1) * per] = block.transpose(2, 3, 1, 0)
    return full.reshape(kh * kw * C, O)


def _conv(g: Graph, node: Node, stats: dict) -> bool:
    x, w = node.inputs[:2]
    b = node.inputs[2] if len(node.inputs) > 2 else None
    a = node.attrs
    N, C, H, W = g.values[x].shape
    _, O, Ho, Wo = g.values[node.name].shape
    O, Cg, kh, kw = g.values[w].shape
    groups = a.get("groups", 1)
    dtype = g.values[node.name].dtype
    if w in g.constants:
        wm = g.add_constant(g.fresh(f"{w}_matrix"), weight_matrix(np.asarray(g.constants[w]), groups),
                            g.values[w].kind).name
    elif groups == 1:                                  # a weight computed at run time: its layout, as ops
        wt = g.add_node("transpose", [w], (kh, kw, C, O), g.values[w].dtype, {"perm": [2, 3, 1, 0]}, node.source,
                        name=f"{w}_hwio", before=node).name
        wm = g.add_node("reshape", [wt], (kh * kw * C, O), g.values[w].dtype, {"shape": [kh * kw * C, O]},
                        node.source, name=f"{w}_matrix", before=node).name
    else:
        return False

    def add(op, inputs, shape, attrs=None, name=None):
        return g.add_node(op, inputs, shape, dtype, attrs or {}, node.source, name=name, before=node).name

    xt = add("transpose", [x], (N, H, W, C), {"perm": NHWC}, f"{x}_nhwc")
    pointwise = (kh, kw) == (1, 1) and a["stride"] == [1, 1] and a["padding"] == [0, 0]
    if pointwise:
        cols = add("reshape", [xt], (N * H * W, C), {"shape": [N * H * W, C]}, f"{x}_rows")
    else:
        cols = add("im2col", [xt], (N * Ho * Wo, kh * kw * C),
                   {"kernel_size": [kh, kw], "stride": a["stride"], "padding": a["padding"],
                    "dilation": a["dilation"], "layout": "NHWC"}, f"{x}_cols")
    y = add("matmul", [cols, wm], (N * Ho * Wo, O), name=f"{node.name}_mm")
    if b is not None:
        bias = g.add_node("broadcast", [b], (N * Ho * Wo, O), g.values[b].dtype, {"shape": [N * Ho * Wo, O]},
                          node.source, name=f"{b}_bcast", before=node).name
        y = add("add", [y, bias], (N * Ho * Wo, O), name=f"{node.name}_bias")
    y = add("reshape", [y], (N, Ho, Wo, O), {"shape": [N, Ho, Wo, O]}, f"{node.name}_nhwc")
    node.op, node.inputs, node.attrs = "transpose", [y], {"perm": NCHW}
    stats["pointwise" if pointwise else "im2col"] += 1
    return True


def _pool(g: Graph, node: Node, stats: dict) -> None:
    x = node.inputs[0]
    N, C, H, W = g.values[x].shape
    _, _, Ho, Wo = g.values[node.name].shape
    dtype = g.values[node.name].dtype
    xt = g.add_node("transpose", [x], (N, H, W, C), dtype, {"perm": NHWC}, node.source, name=f"{x}_nhwc",
                    before=node).name
    attrs = dict(node.attrs, mode="max" if node.op == "max_pool2d" else "avg")
    y = g.add_node("pool2d", [xt], (N, Ho, Wo, C), dtype, attrs, node.source, name=f"{node.name}_nhwc", before=node)
    node.op, node.inputs, node.attrs = "transpose", [y.name], {"perm": NCHW}
    stats["pools"] += 1


def _inverse(perm: list) -> list:
    return [perm.index(i) for i in range(len(perm))]


def _sink(g: Graph, stats: dict) -> bool:
    """One element-wise op whose tensor inputs are all transposes (by one perm) of single readers, with
    other inputs constants: compute it before the transpose (the constants permuted once)."""
    producers, users = g.producers(), g.users()
    for node in g.nodes:
        if node.op not in ACTIVATIONS + UNARY + ELEMENTWISE:
            continue
        perms, ok = [], True
        for i in node.inputs:
            p = producers.get(i)
            if g.values[i].kind in ("param", "const") or (p is not None and p.op == "broadcast"
                                                          and g.values[p.inputs[0]].kind in ("param", "const")):
                continue
            if p is None or p.op != "transpose" or len(users.get(i, [])) != 1 or i in g.outputs:
                ok = False
                break
            perms.append(p.attrs["perm"])
        if not ok or not perms or any(p != perms[0] for p in perms):
            continue
        perm, inverse = perms[0], _inverse(perms[0])
        out = g.values[node.name]
        shape = tuple(out.shape[i] for i in inverse)                  # the op's shape before the transpose
        inputs = []
        for i in node.inputs:
            p = producers.get(i)
            if p is not None and p.op == "transpose":
                inputs.append(p.inputs[0])
                continue
            src = p.inputs[0] if p is not None and p.op == "broadcast" else i
            array = np.asarray(g.constants[src])
            array = array.reshape((1,) * (len(perm) - array.ndim) + array.shape).transpose(inverse)
            c = g.add_constant(g.fresh(f"{src}_nhwc"), np.ascontiguousarray(array), g.values[src].kind).name
            inputs.append(g.add_node("broadcast", [c], shape, g.values[c].dtype, {"shape": list(shape)},
                                     node.source, name=f"{c}_bcast", before=node).name
                          if tuple(array.shape) != shape else c)
        inner = g.add_node(node.op, inputs, shape, out.dtype, node.attrs, node.source, name=f"{node.name}_nhwc",
                           before=node)
        node.op, node.inputs, node.attrs = "transpose", [inner.name], {"perm": list(perm)}
        stats["sunk"] += 1
        return True
    return False


def _cancel(g: Graph, stats: dict) -> None:
    """transpose(transpose(x, p), q) with q∘p the identity -> x."""
    producers = g.producers()
    for node in list(g.nodes):
        inner = producers.get(node.inputs[0]) if node.op == "transpose" else None
        if inner is None or inner.op != "transpose":
            continue
        if [inner.attrs["perm"][p] for p in node.attrs["perm"]] == list(range(len(node.attrs["perm"]))):
            g.replace_uses(node.name, inner.inputs[0])
            stats["cancelled"] += 1
    g.remove_unused()


def run(g: Graph, options=None) -> Graph:
    stats = {"im2col": 0, "pointwise": 0, "pools": 0, "sunk": 0, "cancelled": 0}
    for node in list(g.nodes):
        if node.op == "conv2d":
            _conv(g, node, stats)
        elif node.op in ("max_pool2d", "avg_pool2d"):
            _pool(g, node, stats)
    if stats["im2col"] or stats["pointwise"] or stats["pools"]:
        while _sink(g, stats):
            pass
        _cancel(g, stats)
    g.meta.setdefault("pass_stats", {})[NAME] = stats
    return g
