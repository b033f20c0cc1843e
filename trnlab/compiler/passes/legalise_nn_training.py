"""Legalise the backward ATen ops of students' models into ops with kernels (training graphs only).

Runs in the training pipeline after `legalise`, `legalise_training` and `legalise_nn`. Each gradient
is written as ops the forward already has, in the convolution pass's channels-last layout:

    convolution_backward(dy, x, w, ...)[0] -> dx = col2im(dy_rows @ W_matrix.T)    (the windows' adjoint)
                                      [1] -> dw = im2col(x).T @ dy_rows, back to [O, C, kh, kw]
                                      [2] -> db = sum(dy, dims=[0, 2, 3])
        (dy_rows = dy in NHWC as [N*Ho*Wo, O]; the training lowering reads both transposes of the
         matmuls in place, nothing is copied; groups = 1: training/aot.py splits a grouped convolution into
         one convolution per group before this pass)
    max_pool2d_with_indices_backward / avg_pool2d_backward -> pool2d_backward (NHWC): the maximum
        is found again from x (PyTorch's first index in the window), so the indices are not needed
    where(le(y, 0), 0, dy)                 -> relu_backward(y, dy)     (ReLU's gradient from its output)
    _scaled_dot_product_flash_attention_for_cpu_backward(dO, q, k, v, O, lse, ...)[i] -> batched matmuls
        with the probabilities recomputed (no dropout; the causal mask and/or an additive attn_mask)
    where(all(s == -inf), 0, softmax(s))   -> softmax(s) when no row of the scores can be all masked
                                              (SDPA's decomposition; a constant mask is checked)
    where(c, x, 0) with c a constant       -> x * c                   (select's and split's gradients)
    _native_batch_norm_legit_functional    -> the batch's mean, rstd and (x - mean) * rstd * w + b (training)
    native_dropout(x, p, True)             -> mask = dropout_mask(x, seed, p) (the chip's RNG, seeded by the
        `dropout_seed` constant, which trnlab.training.aot advances every step), out = x * mask / (1 - p);
        the backward multiplies by the saved mask as PyTorch's graph says
"""
from __future__ import annotations

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.passes.convolution import NCHW, NHWC
from trnlab.compiler.passes.legalise import _args, _kwargs, _set

NAME = "legalise_nn_training"


def _shared_adder(g: Graph, node: Node, dtype, shared: dict, prefix: str, default: str):
    """`add(op, inputs, shape, attrs, name)` inserting a node before `node`, made once per (op, inputs,
    attrs) over the whole pass (`shared`): the several outputs of one backward op, and the backward ops of
    one forward op, reuse what another already added."""
    def add(op, inputs, shape, attrs=None, name=default):
        key = (op, tuple(inputs), repr(attrs))
        if key not in shared:
            shared[key] = g.add_node(op, inputs, shape, dtype, attrs or {}, node.source, name=f"{prefix}_{name}",
                                     before=node).name
        return shared[key]
    return add


def _conv_backward(g: Graph, node: Node, args: list, shared: dict) -> bool:
    dy, x, w = args[:3]
    stride, padding, dilation, transposed, _, groups = args[4:10]
    item = node.attrs.get("item")
    if transposed or groups != 1 or item not in (0, 1, 2):
        return False
    out = g.values[node.name]
    dtype = out.dtype
    if len(g.values[x].shape) == 3:                   # 1-D: the 2-D gradient of height 1, reshapes around it
        def as_2d(name):
            shape = g.values[name].shape
            return g.add_node("reshape", [name], (*shape[:2], 1, shape[2]), g.values[name].dtype,
                              {"shape": [*shape[:2], 1, shape[2]]}, node.source, name=f"{name}_2d", before=node).name
        key = ("2d", dy, x, w)
        if key not in shared:
            shared[key] = tuple(as_2d(v) for v in (dy, x, w))
        dy, x, w = shared[key]
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    N, C, H, W = g.values[x].shape
    O, _, kh, kw = g.values[w].shape
    _, _, Ho, Wo = g.values[dy].shape
    K, M = kh * kw * C, N * Ho * Wo
    window = {"kernel_size": [kh, kw], "stride": list(stride), "padding": list(padding), "dilation": list(dilation)}
    pointwise = (kh, kw) == (1, 1) and list(stride) == [1, 1] and list(padding) == [0, 0]

    add = _shared_adder(g, node, dtype, shared, node.name, "g")

    if item == 2:
        _set(node, "sum", [dy], {"dims": [0, 2, 3] if len(g.values[dy].shape) == 4 else [0, 2], "keepdim": False})
        return True
    final = out.shape
    rows = add("reshape", [add("transpose", [dy], (N, Ho, Wo, O), {"perm": NHWC}, "dy_nhwc")], (M, O),
               {"shape": [M, O]}, "dy_rows")
    if item == 1:
        xt = add("transpose", [x], (N, H, W, C), {"perm": NHWC}, "x_nhwc")
        cols = add("reshape", [xt], (M, K), {"shape": [M, K]}, "x_rows") if pointwise else \
            add("im2col", [xt], (M, K), dict(window, layout="NHWC"), "x_cols")
        colsT = add("transpose", [cols], (K, M), {"perm": [1, 0]}, "x_colsT")
        dw = add("matmul", [colsT, rows], (K, O), name="dw_matrix")
        dw = add("reshape", [dw], (kh, kw, C, O), {"shape": [kh, kw, C, O]}, "dw_hwio")
        dw = add("transpose", [dw], (O, C, kh, kw), {"perm": [3, 2, 0, 1]}, "dw")
        _set(node, "reshape", [dw], {"shape": list(final)})
        return True
    wt = add("transpose", [w], (kh, kw, C, O), {"perm": [2, 3, 1, 0]}, "w_hwio")
    wm = add("reshape", [wt], (K, O), {"shape": [K, O]}, "w_matrix")
    wmT = add("transpose", [wm], (O, K), {"perm": [1, 0]}, "w_matrixT")
    dcols = add("matmul", [rows, wmT], (M, K), name="dx_cols")
    if pointwise:
        dx = add("reshape", [dcols], (N, H, W, C), {"shape": [N, H, W, C]}, "dx_nhwc")
    else:
        dx = add("col2im", [dcols], (N, H, W, C), dict(window, image_shape=[N, H, W, C]), "dx_nhwc")
    dx = add("transpose", [dx], (N, C, H, W), {"perm": NCHW}, "dx")
    _set(node, "reshape", [dx], {"shape": list(final)})
    return True


def _pool_backward(g: Graph, node: Node, args: list, mode: str) -> bool:
    dy, x, k, stride, padding = args[:5]
    k = list(k) if isinstance(k, (list, tuple)) else [k, k]
    stride = (list(stride) or k) if isinstance(stride, (list, tuple)) else [stride, stride]
    padding = list(padding) if isinstance(padding, (list, tuple)) else [padding, padding]
    if mode == "max" and (list(args[5]) not in ([1, 1], [1]) or args[6]):
        return False
    if mode == "avg" and (args[5] or (not args[6] and padding != [0, 0]) or args[7] is not None):
        return False
    N, C, H, W = g.values[x].shape
    _, _, Ho, Wo = g.values[dy].shape
    dtype = g.values[node.name].dtype
    xt = g.add_node("transpose", [x], (N, H, W, C), dtype, {"perm": NHWC}, node.source, name=f"{node.name}_x",
                    before=node).name
    dyt = g.add_node("transpose", [dy], (N, Ho, Wo, C), dtype, {"perm": NHWC}, node.source, name=f"{node.name}_dy",
                     before=node).name
    dx = g.add_node("pool2d_backward", [xt, dyt], (N, H, W, C), dtype,
                    {"kernel_size": k, "stride": stride, "padding": padding, "mode": mode}, node.source,
                    name=f"{node.name}_nhwc", before=node).name
    _set(node, "transpose", [dx], {"perm": NCHW})
    return True


def _relu_backward(g: Graph, node: Node) -> bool:
    cond, zero, dy = node.inputs
    producers = g.producers()
    le = producers.get(cond)
    if le is None or le.op != "aten.le.Scalar" or _args(le)[1] != 0 or zero not in g.constants:
        return False
    if float(g.constants[zero]) != 0.0 or g.values[zero].shape != ():
        return False
    y = le.inputs[0]
    while producers.get(y) is not None and producers[y].op == "copy":
        y = producers[y].inputs[0]
    _set(node, "relu_backward", [y, dy])
    return True


SEED = "dropout_seed"          # a [1, 1] int32 constant; trnlab.training.aot changes it every step


def _dropout(g: Graph, node: Node, args: list, shared: dict) -> bool:
    """native_dropout(x, p, train)[1] -> dropout_mask(x, seed, p=) (the chip's RNG), [0] -> x * mask / (1 - p)."""
    import numpy as np
    import torch
    x, p = args[0], float(args[1])
    item = node.attrs.get("item")
    if item not in (0, 1) or not args[2]:
        return False
    if SEED not in g.constants:                     # drawn from torch's generator: torch.manual_seed reproduces it
        g.add_constant(SEED, np.array([[int(torch.randint(0, 2 ** 31 - 1, (1,)))]], np.int32))
    shape = g.values[x].shape
    key = ("dropout", x, p)
    if key not in shared:
        shared[key] = g.add_node("dropout_mask", [x, SEED], shape, "float32", {"p": p}, node.source,
                                 name=f"{x}_keep", before=node).name
    mask = shared[key]
    if item == 1:
        g.values[node.name].dtype = "float32"       # 0/1 in fp32 on the chip (bool when it leaves the device)
        _set(node, "copy", [mask])
        return True
    kept = g.add_node("mul", [x, mask], shape, g.values[node.name].dtype, {}, node.source, name=f"{node.name}_kept",
                      before=node).name
    _set(node, "mul", [kept], {"scalar": 1.0 / (1.0 - p)})
    return True


def _attention_guard(g: Graph, node: Node) -> bool:
    """where(all(s == -inf, -1), 0, softmax(s)) -> softmax(s): SDPA's decomposition zeroes the rows whose
    scores are all masked. With no mask, or a constant mask that leaves every row a finite score (causal),
    no row is, and the guard is the identity (checked here on the mask's values)."""
    import numpy as np
    producers = g.producers()

    def through(name, *ops):
        n = producers.get(name)
        for op in ops:
            if n is None or n.op != op:
                return None
            n = producers.get(n.inputs[0]) if op != ops[-1] else n
        return n

    cond, zero, y = node.inputs
    eq = through(cond, "logical_not", "aten.any.dim", "logical_not", "aten.eq.Scalar")
    sm = producers.get(y)
    if eq is None or sm is None or sm.op != "softmax" or eq.inputs[0] != sm.inputs[0] or zero not in g.constants:
        return False
    if np.any(np.asarray(g.constants[zero]) != 0):
        return False
    scores = producers.get(sm.inputs[0])
    if scores is not None and scores.op == "add":                   # an additive mask: constant, a finite per row
        masks = [producers.get(i) for i in scores.inputs]
        consts = [m.inputs[0] if m is not None and m.op == "broadcast" else i for m, i in zip(masks, scores.inputs)]
        known = [c for c in consts if c in g.constants]
        if not known or not np.all(np.isfinite(np.asarray(g.constants[known[0]])).any(axis=-1)):
            return False
    g.replace_uses(node.name, y)
    return True


def _sdpa_backward(g: Graph, node: Node, args: list, shared: dict) -> bool:
    """_scaled_dot_product_flash_attention_for_cpu_backward(dO, q, k, v, O, lse, p, causal, mask, scale)[i] as
    batched matmuls, the probabilities recomputed (P = softmax(scale q k.T + causal mask + attn_mask)):
    dV = P.T dO, dP = dO V.T, dS = P (dP - rowsum(dO O)), dQ = scale dS K, dK = scale dS.T Q."""
    import numpy as np
    d_out, q, k, v, o = args[:5]
    item = node.attrs.get("item")
    rest = dict(zip(("dropout_p", "is_causal", "attn_mask"), args[6:9]), **_kwargs(node))
    attn_mask = rest.get("attn_mask")
    if item not in (0, 1, 2) or rest.get("dropout_p") or (attn_mask is not None and (
            not isinstance(attn_mask, str) or g.values[attn_mask].dtype == "bool")):
        return False
    *lead, T, d = g.values[q].shape
    S, dv = g.values[k].shape[-2], g.values[v].shape[-1]
    G = int(np.prod(lead))
    dtype = g.values[node.name].dtype
    scale = rest.get("scale")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)

    add = _shared_adder(g, node, dtype, shared, node.name, "g")

    def three(x, rows, cols, name):
        return add("reshape", [x], (G, rows, cols), {"shape": [G, rows, cols]}, name)

    q3, k3, v3, o3, do3 = (three(q, T, d, "q"), three(k, S, d, "k"), three(v, S, dv, "v"), three(o, T, dv, "o"),
                           three(d_out, T, dv, "do"))
    scores = add("mul", [add("batch_matmul", [q3, add("transpose", [k3], (G, d, S), {"perm": [0, 2, 1]}, "kT")],
                             (G, T, S), name="qk")], (G, T, S), {"scalar": scale}, "scores")
    if rest.get("is_causal"):
        key = ("causal", T, S)
        if key not in shared:
            mask = np.where(np.tril(np.ones((T, S), bool)), 0.0, -np.inf).astype(np.float32)
            shared[key] = g.add_constant(g.fresh(f"{node.name}_causal"), mask).name
        full = add("broadcast", [shared[key]], (G, T, S), {"shape": [G, T, S]}, "mask")
        scores = add("add", [scores, full], (G, T, S), name="masked")
    if attn_mask is not None:        # additive (SDPA made a boolean mask 0 / -inf before the fused op)
        full = add("broadcast", [attn_mask], (*lead, T, S), {"shape": [*lead, T, S]}, "attn_mask")
        scores = add("add", [scores, three(full, T, S, "attn_mask_3d")], (G, T, S), name="attn_masked")
    probs = add("softmax", [scores], (G, T, S), {"dim": -1}, "probs")
    if item == 2:
        result = add("batch_matmul", [add("transpose", [probs], (G, S, T), {"perm": [0, 2, 1]}, "pT"), do3],
                     (G, S, dv), name="dv")
    else:
        dp = add("batch_matmul", [do3, add("transpose", [v3], (G, dv, S), {"perm": [0, 2, 1]}, "vT")], (G, T, S),
                 name="dp")
        row = add("sum", [add("mul", [do3, o3], (G, T, dv), name="do_o")], (G, T, 1), {"dims": [2], "keepdim": True},
                  "D")
        ds = add("mul", [probs, add("sub", [dp, row], (G, T, S), name="dp_D")], (G, T, S), name="dS")
        ds = add("mul", [ds], (G, T, S), {"scalar": scale}, "dS_scaled")
        if item == 0:
            result = add("batch_matmul", [ds, k3], (G, T, d), name="dq")
        else:
            result = add("batch_matmul", [add("transpose", [ds], (G, S, T), {"perm": [0, 2, 1]}, "dST"), q3],
                         (G, S, d), name="dk")
    _set(node, "reshape", [result], {"shape": list(g.values[node.name].shape)})
    return True


def _select_zero(g: Graph, node: Node) -> bool:
    """where(c, x, 0) with a constant condition -> x * c (and where(c, 0, x) -> x * !c): `select`'s and
    `split`'s gradients put each part back in place this way."""
    import numpy as np
    cond, a, b = node.inputs
    if cond not in g.constants:
        return False
    zero = [i for i in (a, b) if i in g.constants and not np.any(np.asarray(g.constants[i]))]
    if len(zero) != 1 or g.values[zero[0]].shape == ():
        return False                       # a number on one side: the training lowering's masked_fill
    keep = np.asarray(g.constants[cond]).astype(bool)
    x = b if zero[0] == a else a
    keep = ~keep if zero[0] == a else keep
    dtype = g.values[node.name].dtype
    factor = g.add_constant(g.fresh(f"{node.name}_keep"), keep.astype(np.float32 if dtype == "float32" else np.dtype(
        g.constants[zero[0]].dtype))).name
    if g.values[x].shape != g.values[node.name].shape:
        return False
    _set(node, "mul", [x, factor])
    return True


def _batch_norm_training(g: Graph, node: Node, args: list, shared: dict) -> bool:
    """_native_batch_norm_legit_functional(x, w, b, running_mean, running_var, True, momentum, eps)[i]:
    [0] y = (x - mean) * rstd * w + b with the batch's statistics over every axis but the channels',
    [1] the mean, [2] rstd = 1 / sqrt(var + eps) (saved for the backward). [3], [4] (the new running
    statistics) are made on the host after the step (trnlab.training.aot), from [1], [2] and the buffers."""
    x, w, b = args[:3]
    training, eps = args[5], float(args[7])
    item = node.attrs.get("item")
    if not training or item not in (0, 1, 2):
        return False
    shape = list(g.values[x].shape)
    C, dims = shape[1], [0] + list(range(2, len(shape)))
    per = [1, C] + [1] * (len(shape) - 2)
    dtype = g.values[x].dtype

    add = _shared_adder(g, node, dtype, shared, x, "bn")

    mean = add("mean", [x], (C,), {"dims": dims, "keepdim": False}, "mean")
    xc = add("sub", [x, add("reshape", [mean], per, {"shape": per}, "mean_c")], shape, name="centred")
    var = add("mean", [add("mul", [xc, xc], shape, name="sq")], (C,), {"dims": dims, "keepdim": False}, "var")
    rstd = add("rsqrt", [add("add", [var], (C,), {"scalar": eps}, "var_eps")], (C,), name="rstd")
    if item == 1:
        _set(node, "copy", [mean])
        return True
    if item == 2:
        _set(node, "copy", [rstd])
        return True
    y = add("mul", [xc, add("reshape", [rstd], per, {"shape": per}, "rstd_c")], shape, name="normed")
    if w is not None:
        y = add("mul", [y, add("reshape", [w], per, {"shape": per}, "w_c")], shape, name="scaled")
    if b is not None:
        y = add("add", [y, add("reshape", [b], per, {"shape": per}, "b_c")], shape, name="shifted")
    _set(node, "copy", [y])
    return True


def run(g: Graph, options=None) -> Graph:
    shared: dict = {}
    for node in list(g.nodes):
        args = _args(node) if node.op.startswith("aten.") else None
        if node.op == "aten.convolution_backward.default":
            _conv_backward(g, node, args, shared)
        elif node.op == "aten.max_pool2d_with_indices_backward.default":
            _pool_backward(g, node, args, "max")
        elif node.op == "aten.avg_pool2d_backward.default":
            _pool_backward(g, node, args, "avg")
        elif node.op == "aten._scaled_dot_product_flash_attention_for_cpu_backward.default":
            _sdpa_backward(g, node, args, shared)
        elif node.op == "aten._native_batch_norm_legit_functional.default":
            _batch_norm_training(g, node, args, shared)
        elif node.op == "aten.native_dropout.default":
            _dropout(g, node, args, shared)
        elif node.op == "where" and len(node.inputs) == 3:
            _relu_backward(g, node) or _attention_guard(g, node) or _select_zero(g, node)
    g.remove_unused()
    return g
