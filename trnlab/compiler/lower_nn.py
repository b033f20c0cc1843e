"""Lowering of the ops students' models bring (`legalise_nn`, `convolution`): each op -> kernel calls.

`lower.py` handles the tiny GPT's ops and asks `lower_node` here for anything else. Kernels are named
"module.function" of `trnlab.kernels` (as the training lowering names them):

    relu tanh sigmoid silu rsqrt sqrt exp log neg abs -> pointwise.unary(x [R, C], op)
    add sub mul div pow maximum with a number       -> pointwise.scalar(x [R, C], op, value, reverse)
    ... of two tensors                              -> pointwise.binary(a [R, C], b [R, C] | [R, 1] | [1, C], op):
                                                       the broadcast is read from the shapes (`binary_views`)
    sum mean amax                                   -> pointwise.reduce_rows(x [R, C]) (the reduced axes moved
                                                       last by a transpose first if they are not)
    transpose(perm)                                 -> shape_ops.batch_transpose [A, B, C] -> [A, C, B], or
                                                       shape_ops.swap_middle_axes [A, B, C, D] -> [A, C, B, D]
    broadcast                                       -> pointwise.expand ([a, b, c] -> [A, B, C], each axis
                                                       group repeated or not)
    slice (step 1) / concat                         -> shape_ops.slice_columns / concat_columns
    batch_matmul                                    -> shape_ops.batch_matmul
    im2col / pool2d                                 -> conv.im2col / conv.pool2d (NHWC)
    sdpa (causal, no mask)                          -> attention.causal_attention(q, k, v [B, H, T, d], scale)
    relu_backward / pool2d_backward / col2im        -> pointwise.relu_backward / conv.pool2d_backward / conv.col2im

The training lowering (trnlab.training.lower) asks here too, with its own call type (its `step_call`).

A kernel whose output shape differs from the op's (a reduction's [R, 1], a transpose's 3-D view) is
followed by a free view to the op's shape.
"""
from __future__ import annotations

import math

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.ops import ACTIVATIONS, UNARY

UNARY_KERNEL = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu", "gelu_tanh": "gelu_apprx_tanh",
                "rsqrt": "rsqrt", "sqrt": "sqrt", "exp": "exp", "log": "log", "neg": "negative", "abs": "abs"}
BINARY_KERNEL = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "power",
                 "maximum": "maximum"}
COMMUTATIVE = ("add", "mul", "maximum")
OPS = tuple(UNARY_KERNEL) + tuple(BINARY_KERNEL) + ("sum", "mean", "amax", "transpose", "broadcast", "slice",
                                                    "concat", "batch_matmul", "im2col", "pool2d", "sdpa",
                                                    "relu_backward", "pool2d_backward", "col2im", "dropout_mask")


def binary_views(out: tuple, a: tuple, b: tuple) -> tuple[list, list] | None:
    """([R, C] view of a, view of b) for a <op> b broadcast to `out`, with a of `out`'s shape and b of the
    same shape, one number per row ([R, 1]) or one row for all rows ([1, C]); None if no split fits."""
    out, a, b = list(out), list(a), list(b)
    if a != out:
        return None
    b = [1] * (len(out) - len(b)) + b
    if b == out:
        return _rows(out), _rows(out)
    for k in range(len(out) + 1):
        R, C = math.prod(out[:k]), math.prod(out[k:])
        if all(s == 1 for s in b[:k]) and b[k:] == out[k:]:
            return [R, C], [1, C]
        if b[:k] == out[:k] and all(s == 1 for s in b[k:]):
            return [R, C], [R, 1]
    for k1 in range(1, len(out)):                      # a middle axis: [A, R, C] against [1, R, 1]
        for k2 in range(k1 + 1, len(out)):
            if all(s == 1 for s in b[:k1]) and b[k1:k2] == out[k1:k2] and all(s == 1 for s in b[k2:]):
                A, R, C = math.prod(out[:k1]), math.prod(out[k1:k2]), math.prod(out[k2:])
                return [A, R, C], [1, R, 1]
    return None


def _rows(shape) -> list:
    shape = list(shape)
    if not shape:
        return [1, 1]
    return [math.prod(shape[:-1]), shape[-1]]


def permute_views(shape, perm) -> tuple[str, list] | None:
    """(kernel, view of x) for x.permute(perm): [identity prefix] + two swapped blocks + [identity suffix]."""
    perm, shape, n = list(perm), list(shape), len(perm)
    k = 0
    while k < n and perm[k] == k:
        k += 1
    end = n
    while end > k and perm[end - 1] == end - 1:
        end -= 1
    middle = perm[k:end]
    if not middle:
        return None
    m = None
    for split in range(1, len(middle)):                # middle = [m..end-1] + [k..m-1]
        m = k + len(middle) - split
        if middle == list(range(m, end)) + list(range(k, m)):
            break
    else:
        return None
    A, B, C, D = (math.prod(shape[:k]), math.prod(shape[k:m]), math.prod(shape[m:end]), math.prod(shape[end:]))
    if D == 1:
        return "shape_ops.batch_transpose", [A, B, C]
    return "shape_ops.swap_middle_axes", [A, B, C, D]


def expand_groups(src, out) -> tuple[list, list] | None:
    """(x viewed as [a, b, c], the output as [A, B, C]) for a broadcast of `src` to `out`: consecutive axes
    that are all repeated (or all kept) merged, at most three groups; None if there are more."""
    src = [1] * (len(out) - len(src)) + list(src)
    groups: list = []                              # [repeated?, src size, out size]
    for s, o in zip(src, out):
        if o == 1:
            continue
        repeated = s == 1
        if groups and groups[-1][0] == repeated:
            groups[-1][1] *= s
            groups[-1][2] *= o
        else:
            groups.append([repeated, s, o])
    if len(groups) > 3:
        return None
    groups = [[False, 1, 1]] * (3 - len(groups)) + groups
    return [g[1] for g in groups], [g[2] for g in groups]


def permute_steps(shape, perm) -> list:
    """[(kernel, view, local perm)] that together permute `shape` by `perm`: one block swap if the
    permutation is one, else one per axis moved into place (each a swap of two adjacent blocks)."""
    found = permute_views(shape, perm)
    if found is not None:
        return [(*found, list(perm))]
    steps, cur, shape = [], list(range(len(perm))), list(shape)
    for k in range(len(perm)):
        if cur[k] == perm[k]:
            continue
        j = cur.index(perm[k])
        local = list(range(k)) + [j] + list(range(k, j)) + list(range(j + 1, len(perm)))
        steps.append((*permute_views(shape, local), local))
        cur = [cur[p] for p in local]
        shape = [shape[p] for p in local]
    return steps


def lower_node(g: Graph, node: Node, region: str, Call, unsupported) -> list:
    """The calls of one op (a kernel, maybe a transpose before it and a view after it); raises
    `unsupported(node, why)` if no kernel fits."""
    v = g.values[node.name]
    ins = [g.values[i] for i in node.inputs]
    op, a = node.op, node.attrs
    calls = []

    def kernel(name, inputs, views, kwargs=None, out_shape=None, output=None):
        shapes = {n: list(g.values[n].shape) for n in node.inputs}
        views = [list(shapes.get(i, [])) if w is None and i is not None else w for i, w in zip(inputs, views)]
        shape = list(out_shape or views[0])
        target = output or (node.name if shape == list(v.shape) else g.fresh(f"{node.name}_k"))
        calls.append(Call("kernel", op, region, list(inputs), target, shape, name, list(views), dict(kwargs or {}),
                          source=node.source, dtype=v.dtype))
        if target != node.name and output is None:
            calls.append(Call("view", "reshape", region, [target], node.name, list(v.shape), source=node.source,
                              dtype=v.dtype))
        return target

    if op in UNARY_KERNEL and op in ACTIVATIONS + UNARY:
        kernel("pointwise.unary", node.inputs, [_rows(v.shape)], {"op": UNARY_KERNEL[op]})
    elif op in BINARY_KERNEL and "scalar" in a:
        kernel("pointwise.scalar", node.inputs, [_rows(v.shape)],
               {"op": BINARY_KERNEL[op], "value": float(a["scalar"]), "reverse": bool(a.get("reverse"))})
    elif op in BINARY_KERNEL and len(ins) == 2:
        first, second = node.inputs
        views = binary_views(v.shape, ins[0].shape, ins[1].shape)
        if views is None and op in COMMUTATIVE:
            first, second = second, first
            views = binary_views(v.shape, ins[1].shape, ins[0].shape)
        if views is None:
            raise unsupported(node, f"{op} of shapes {list(ins[0].shape)} and {list(ins[1].shape)} (the kernel "
                                    f"broadcasts the second operand along rows or columns only)")
        kernel("pointwise.binary", [first, second], list(views), {"op": BINARY_KERNEL[op]})
    elif op in ("sum", "mean", "amax"):
        x, shape, dims = node.inputs[0], list(ins[0].shape), list(a["dims"])
        keep = [d for d in range(len(shape)) if d not in dims]
        if dims != list(range(len(shape) - len(dims), len(shape))):          # reduced axes last first
            perm = keep + dims
            moved = [shape[p] for p in perm]
            found = permute_views(shape, perm)
            if found is None:
                raise unsupported(node, f"{op} over axes {dims} of {shape}")
            x = kernel(found[0], [x], [found[1]], out_shape=moved, output=g.fresh(f"{node.name}_moved"))
            shape = moved
        R, C = math.prod(shape[:len(keep)]), math.prod(shape[len(keep):])
        kernel("pointwise.reduce_rows", [x], [[R, C]], {"op": "maximum" if op == "amax" else "add",
                                                         "scale": 1.0 / C if op == "mean" else 1.0}, out_shape=[R, 1])
    elif op == "transpose":
        x, shape = node.inputs[0], list(ins[0].shape)
        steps = permute_steps(shape, a["perm"])
        for i, (kind, view, local) in enumerate(steps):
            out_view = [view[0], view[2], view[1]] if len(view) == 3 else [view[0], view[2], view[1], view[3]]
            shape = [shape[p] for p in local]
            last = i == len(steps) - 1
            x = kernel(kind, [x], [view], out_shape=out_view, output=None if last else g.fresh(f"{node.name}_step{i}"))
            if not last:
                calls[-1].views = [view]
    elif op == "broadcast":
        groups = expand_groups(ins[0].shape, v.shape)
        if groups is None:
            raise unsupported(node, f"broadcast of {list(ins[0].shape)} to {list(v.shape)} (more than three groups "
                                    f"of axes alternate between repeated and not)")
        src, out = groups
        kernel("pointwise.expand", node.inputs, [src], {"shape": out}, out_shape=out)
    elif op == "slice":
        dim, start, end = a["dim"], a["start"], a["end"]
        if a.get("step", 1) != 1:
            raise unsupported(node, "a strided slice")
        shape = ins[0].shape
        inner = math.prod(shape[dim + 1:])
        kernel("shape_ops.slice_columns", node.inputs, [[math.prod(shape[:dim]), shape[dim] * inner]],
               {"start": start * inner, "end": end * inner}, out_shape=[math.prod(shape[:dim]), (end - start) * inner])
    elif op == "concat":
        dim = a["dim"]
        views = [[math.prod(x.shape[:dim]), math.prod(x.shape[dim:])] for x in ins]
        kernel("shape_ops.concat_columns", node.inputs, views,
               out_shape=[views[0][0], sum(w[1] for w in views)])
    elif op == "batch_matmul":
        kernel("shape_ops.batch_matmul", node.inputs, [None, None], out_shape=v.shape)
    elif op == "im2col":
        kernel("conv.im2col", node.inputs, [None], {k: a[k] for k in ("kernel_size", "stride", "padding", "dilation")},
               out_shape=v.shape)
    elif op == "pool2d":
        kernel("conv.pool2d", node.inputs, [None],
               {"kernel_size": a["kernel_size"], "stride": a["stride"], "padding": a["padding"],
                "op": a["mode"]}, out_shape=v.shape)
    elif op == "dropout_mask":
        kernel("pointwise.dropout_mask", node.inputs, [_rows(v.shape), [1, 1]], {"p": a["p"]})
    elif op == "relu_backward":
        kernel("pointwise.relu_backward", node.inputs, [_rows(v.shape)] * 2)
    elif op == "pool2d_backward":
        kernel("conv.pool2d_backward", node.inputs, [None, None],
               {"kernel_size": a["kernel_size"], "stride": a["stride"], "padding": a["padding"], "op": a["mode"]},
               out_shape=v.shape)
    elif op == "col2im":
        kernel("conv.col2im", node.inputs, [None],
               {k: a[k] for k in ("image_shape", "kernel_size", "stride", "padding", "dilation")}, out_shape=v.shape)
    elif op == "sdpa":
        if not a.get("causal") or len(ins) != 3 or ins[0].shape != ins[1].shape or ins[0].shape[-1] > 128:
            raise unsupported(node, "attention that is not causal, has a mask or a head size over 128 "
                                    "(legalise_nn decomposes those)")
        kernel("attention.causal_attention", node.inputs, [None] * 3, {"scale": a.get("scale")}, out_shape=v.shape)
    else:
        raise unsupported(node, "no kernel implements it")
    return calls
