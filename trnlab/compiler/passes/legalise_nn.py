"""Legalise, part two: the ATen ops of the models students write -> our ops (inference pipeline only).

`legalise` knows the tiny GPT's ops; this pass adds what a CNN, a Llama block or a ViT brings. One
rule per ATen op, each a few lines; shapes broadcast as in PyTorch (the lowering picks the kernel's
broadcast mode), numbers stay attributes:

    convolution(x, w, b, stride, padding, dilation, False, _, groups) -> conv2d(x, w, b, ...)   (1-D: a 2-D
                                                          convolution of height 1, reshapes around it)
    max_pool2d_with_indices(x, k, s, p)[0]  -> max_pool2d     avg_pool2d, _adaptive_avg_pool2d -> avg_pool2d
    _native_batch_norm_legit_no_training(x, w, b, mean, var, _, eps)[0]
                                            -> mul(x, scale) then add(·, shift), per channel: the
                                               statistics are constants at inference, folded now
    sub / div / pow / maximum / rsub with tensors or numbers      -> sub, div, pow, maximum (scalar=, reverse=)
    rsqrt sqrt exp log neg abs              -> the same names
    mean.dim  sum.dim_IntList  amax         -> mean, sum, amax (dims=, keepdim=)
    cat                                     -> concat          select.int -> slice + reshape
    _log_softmax(x, -1)                     -> z = x - amax(x), z - log(sum(exp(z))) (last axis, keepdim)
    scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, scale=) -> sdpa(q, k, v[, mask], causal=)
    native_layer_norm(x, [C], None, None)[0] -> layer_norm with a weight of ones and a bias of zeros
    _transformer_encoder_layer_fwd(...)     -> the layer written out (nn.TransformerEncoderLayer's fast path
                                               in eval under torch.compile; no mask)

The training pipeline does not run it (its own `legalise_training` reads some of these ATen ops).
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.passes.legalise import _args, _broadcast_to, _kwargs, _set

NAME = "legalise_nn"
UNARY = {"aten.rsqrt.default": "rsqrt", "aten.sqrt.default": "sqrt", "aten.exp.default": "exp",
         "aten.log.default": "log", "aten.neg.default": "neg", "aten.abs.default": "abs"}
SDPA = ("aten.scaled_dot_product_attention.default", "aten._scaled_dot_product_flash_attention_for_cpu.default")


def _pair(v) -> list:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(v[0]), int(v[-1])]


def _const(g: Graph, name) -> np.ndarray | None:
    return g.constants.get(name) if isinstance(name, str) else None


def _conv(g: Graph, node: Node, args: list) -> bool:
    x, w, b, stride, padding, dilation, transposed, _, groups = args[:9]
    if transposed:
        return False
    out = g.values[node.name]
    if len(g.values[x].shape) == 4:
        _set(node, "conv2d", [x, w] + ([b] if b else []),
             {"stride": _pair(stride), "padding": _pair(padding), "dilation": _pair(dilation), "groups": int(groups)})
        return True
    if len(g.values[x].shape) != 3:
        return False
    # 1-D: a 2-D convolution of height 1 (x [N, C, L] -> [N, C, 1, L], w [O, C/g, k] -> [O, C/g, 1, k])
    N, C, L = g.values[x].shape
    x4 = g.add_node("reshape", [x], (N, C, 1, L), out.dtype, {"shape": [N, C, 1, L]}, node.source,
                    name=f"{node.name}_2d", before=node).name
    O, Cg, k = g.values[w].shape
    w4 = g.add_node("reshape", [w], (O, Cg, 1, k), g.values[w].dtype, {"shape": [O, Cg, 1, k]}, node.source,
                    name=f"{w}_2d", before=node).name
    Lo = out.shape[-1]
    conv = g.add_node("conv2d", [x4, w4] + ([b] if b else []), (N, O, 1, Lo), out.dtype,
                      {"stride": [1, int(stride[0])], "padding": [0, int(padding[0])],
                       "dilation": [1, int(dilation[0])], "groups": int(groups)}, node.source,
                      name=f"{node.name}_conv2d", before=node)
    _set(node, "reshape", [conv.name], {"shape": list(out.shape)})
    return True


def _batch_norm(g: Graph, node: Node, args: list) -> bool:
    x, w, b, mean, var = args[:5]
    eps = float(args[-1])
    arrays = [_const(g, v) for v in (mean, var)]
    if any(a is None for a in arrays) or (w is not None and _const(g, w) is None) or (b is not None and _const(g, b) is None):
        return False                                  # statistics computed at run time: not eval mode
    mean_a, var_a = (a.astype(np.float64) for a in arrays)
    scale = 1.0 / np.sqrt(var_a + eps) * (_const(g, w).astype(np.float64) if w is not None else 1.0)
    shift = (_const(g, b).astype(np.float64) if b is not None else 0.0) - mean_a * scale
    out = g.values[node.name]
    per_channel = (len(mean_a),) + (1,) * (len(out.shape) - 2)          # [C, 1, 1] against [N, C, H, W]
    dtype = np.dtype(g.constants[mean].dtype)
    s = g.add_constant(g.fresh(f"{node.name}_scale"), scale.astype(dtype).reshape(per_channel)).name
    t = g.add_constant(g.fresh(f"{node.name}_shift"), shift.astype(dtype).reshape(per_channel)).name
    scaled = g.add_node("mul", [x, _broadcast_to(g, s, out.shape, node)], out.shape, out.dtype, {}, node.source,
                        name=f"{node.name}_mul", before=node)
    _set(node, "add", [scaled.name, _broadcast_to(g, t, out.shape, node)])
    return True


def _arith(node: Node, op: str, args: list, reverse: bool = False) -> bool:
    a, b = args[:2]
    if isinstance(a, str) and isinstance(b, str):
        _set(node, op, [a, b])
    elif isinstance(a, str):
        _set(node, op, [a], {"scalar": float(b), **({"reverse": True} if reverse else {})})
    elif isinstance(b, str):                              # number <op> tensor
        _set(node, op, [b], {"scalar": float(a), "reverse": not reverse})
    else:
        return False
    return True


def _attention_ops(g: Graph, node: Node, q: str, k: str, v: str, mask, scale) -> bool:
    """Attention without the causal kernel: softmax(q @ k.T * scale + mask) @ v as batched matmuls, the
    heads of all sequences as one batch [G = B*H, T, d]."""
    *lead, T, d = g.values[q].shape
    S, dv = g.values[k].shape[-2], g.values[v].shape[-1]
    G = int(np.prod(lead))
    out = g.values[node.name]
    dtype = out.dtype
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)

    def add(op, inputs, shape, attrs=None, name="attn"):
        return g.add_node(op, inputs, shape, dtype, attrs or {}, node.source, name=f"{node.name}_{name}",
                          before=node).name

    q3 = add("reshape", [q], (G, T, d), {"shape": [G, T, d]}, "q")
    k3 = add("reshape", [k], (G, S, d), {"shape": [G, S, d]}, "k")
    kt = add("transpose", [k3], (G, d, S), {"perm": [0, 2, 1]}, "kT")
    scores = add("batch_matmul", [q3, kt], (G, T, S), name="scores")
    scores = add("mul", [scores], (G, T, S), {"scalar": scale}, "scaled")
    if mask:
        m = g.values[mask]
        if m.dtype == "bool":
            if mask not in g.constants:
                return False
            bias = np.where(np.asarray(g.constants[mask]), 0.0, -np.inf).astype(np.float32)
            mask = g.add_constant(g.fresh(f"{node.name}_mask"), bias).name
        mshape = (1,) * (len(lead) + 2 - len(m.shape)) + tuple(m.shape)
        full = add("broadcast", [add("reshape", [mask], mshape, {"shape": list(mshape)}, "mask4")],
                   tuple(lead) + (T, S), {"shape": list(lead) + [T, S]}, "mask_b")
        scores = add("add", [scores, add("reshape", [full], (G, T, S), {"shape": [G, T, S]}, "mask3")], (G, T, S),
                     name="masked")
    probs = add("softmax", [scores], (G, T, S), {"dim": -1}, "probs")
    v3 = add("reshape", [v], (G, S, dv), {"shape": [G, S, dv]}, "v")
    y = add("batch_matmul", [probs, v3], (G, T, dv), name="y")
    _set(node, "reshape", [y], {"shape": list(out.shape)})
    return True


def _log_softmax(g: Graph, node: Node, x: str) -> bool:
    """log_softmax over the last axis, written out as the softmax kernel does it (the row's maximum taken
    first, so no exp overflows): z = x - max(x), then z - log(sum(exp(z)))."""
    out = g.values[node.name]
    shape, dtype = tuple(out.shape), out.dtype
    rank = len(shape)
    row = shape[:-1] + (1,)

    def add(op, inputs, shape, attrs=None, name="lsm"):
        return g.add_node(op, inputs, shape, dtype, attrs or {}, node.source, name=f"{node.name}_{name}",
                          before=node).name

    peak = add("amax", [x], row, {"dims": [rank - 1], "keepdim": True}, "max")
    z = add("sub", [x, peak], shape, name="shifted")
    total = add("sum", [add("exp", [z], shape, name="exp")], row, {"dims": [rank - 1], "keepdim": True}, "sum")
    _set(node, "sub", [z, add("log", [total], row, name="log")])
    return True


def _encoder_layer(g: Graph, node: Node, args: list) -> bool:
    """_transformer_encoder_layer_fwd (nn.TransformerEncoderLayer's fast path in eval, no mask) written out:
    x + out_proj(attention(qkv(x))), a layer norm, x + linear2(act(linear1(x))), a layer norm (norm_first:
    the norms before instead). The linears are matmul + bias for `fuse`; the attention as `_attention_ops`."""
    (x, E, H, qkv_w, qkv_b, proj_w, proj_b, use_gelu, norm_first, eps, n1_w, n1_b, n2_w, n2_b,
     w1, b1, w2, b2) = args[:18]
    if len(args) > 18 and args[18] is not None:
        return False
    B, T, _ = g.values[x].shape
    H, d, rows = int(H), int(E) // int(H), B * T
    dtype = g.values[node.name].dtype
    count = [0]

    def add(op, inputs, shape, attrs=None, name="enc"):
        count[0] += 1
        return g.add_node(op, inputs, shape, dtype, attrs or {}, node.source, name=f"{node.name}_{name}{count[0]}",
                          before=node).name

    def linear(h, w, b):                                         # h [rows, K] -> [rows, N]
        N, K = g.values[w].shape
        wt = add("transpose", [w], (K, N), {"perm": [1, 0]}, "wT")
        y = add("matmul", [h, wt], (rows, N), name="mm")
        return add("add", [y, add("broadcast", [b], (rows, N), {"shape": [rows, N]}, "bias")], (rows, N), name="lin")

    def norm(h, w, b):
        return add("layer_norm", [h, w, b], (rows, E), {"eps": float(eps)}, "ln")

    def attention(h):
        qkv = linear(h, qkv_w, qkv_b)                                                      # [rows, 3E]
        heads = []
        for i in range(3):
            part = add("slice", [qkv], (rows, E), {"dim": 1, "start": i * E, "end": (i + 1) * E}, "qkv")
            part = add("reshape", [part], (B, T, H, d), {"shape": [B, T, H, d]}, "heads")
            heads.append(add("transpose", [part], (B, H, T, d), {"perm": [0, 2, 1, 3]}, "bhtd"))
        y = add("sdpa", heads, (B, H, T, d), {"causal": False}, "sdpa")
        _attention_ops(g, g.node(y), *heads, None, None)
        y = add("transpose", [y], (B, T, H, d), {"perm": [0, 2, 1, 3]}, "bthd")
        return linear(add("reshape", [y], (rows, E), {"shape": [rows, E]}, "rows"), proj_w, proj_b)

    def feed_forward(h):
        hidden = linear(h, w1, b1)
        hidden = add("gelu" if use_gelu else "relu", [hidden], g.values[hidden].shape,
                     {"approximate": "none"} if use_gelu else {}, "act")
        return linear(hidden, w2, b2)

    h = add("reshape", [x], (rows, E), {"shape": [rows, E]}, "rows")
    if norm_first:
        h = add("add", [h, attention(norm(h, n1_w, n1_b))], (rows, E), name="res")
        h = add("add", [h, feed_forward(norm(h, n2_w, n2_b))], (rows, E), name="res")
    else:
        h = norm(add("add", [h, attention(h)], (rows, E), name="res"), n1_w, n1_b)
        h = norm(add("add", [h, feed_forward(h)], (rows, E), name="res"), n2_w, n2_b)
    _set(node, "reshape", [h], {"shape": [B, T, int(E)]})
    return True


def _rule(g: Graph, node: Node) -> bool:
    op = node.op
    args = _args(node)
    kw = _kwargs(node)
    out = g.values[node.name]
    x = args[0] if args else None
    if op == "aten.convolution.default":
        return _conv(g, node, args)
    if op in ("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default"):
        if op.endswith("indices.default") and node.attrs.get("item") != 0:
            return False
        k = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else k
        padding = _pair(args[3]) if len(args) > 3 else [0, 0]
        if (len(args) > 4 and _pair(args[4]) != [1, 1]) or (len(args) > 5 and args[5]):
            return False                                  # dilation or ceil_mode
        _set(node, "max_pool2d", [x], {"kernel_size": k, "stride": stride, "padding": padding})
    elif op == "aten.avg_pool2d.default":
        k = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else k
        padding = _pair(args[3]) if len(args) > 3 else [0, 0]
        ceil, include_pad = (list(args) + [None, None, None, None, False, True][len(args):])[4:6]
        if ceil or (not include_pad and padding != [0, 0]) or (len(args) > 6 and args[6] is not None):
            return False
        _set(node, "avg_pool2d", [x], {"kernel_size": k, "stride": stride, "padding": padding})
    elif op == "aten._adaptive_avg_pool2d.default":
        H, W = g.values[x].shape[-2:]
        oh, ow = _pair(args[1])
        if H % oh or W % ow:
            return False
        k = [H // oh, W // ow]
        _set(node, "avg_pool2d", [x], {"kernel_size": k, "stride": k, "padding": [0, 0]})
    elif op == "aten._native_batch_norm_legit_no_training.default" and node.attrs.get("item") == 0:
        return _batch_norm(g, node, args)
    elif op in ("aten.sub.Tensor", "aten.sub.Scalar"):
        if kw.get("alpha", 1) != 1:
            return False
        return _arith(node, "sub", args)
    elif op == "aten.rsub.Scalar":
        return _arith(node, "sub", args, reverse=True)
    elif op in ("aten.div.Tensor", "aten.div.Scalar"):
        if kw.get("rounding_mode") is not None:
            return False
        return _arith(node, "div", args)
    elif op in ("aten.add.Tensor", "aten.add.Scalar", "aten.mul.Tensor", "aten.mul.Scalar"):
        if kw.get("alpha", 1) != 1:
            return False
        return _arith(node, op.split(".")[1], args)
    elif op == "aten.pow.Tensor_Scalar":
        _set(node, "pow", [x], {"scalar": float(args[1])})
    elif op == "aten.maximum.default":
        return _arith(node, "maximum", args)
    elif op in UNARY:
        _set(node, UNARY[op], [x])
    elif op in ("aten.mean.dim", "aten.sum.dim_IntList", "aten.amax.default", "aten.mean.default",
                "aten.sum.default"):
        if kw.get("dtype") is not None:
            return False
        rank = len(g.values[x].shape)
        dims = args[1] if len(args) > 1 and isinstance(args[1], (list, int)) else list(range(rank))
        dims = (dims if isinstance(dims, list) else [dims]) or list(range(rank))      # [] means every axis
        keepdim = bool(args[2]) if len(args) > 2 else bool(kw.get("keepdim", False))
        name = op.split(".")[1]
        _set(node, name, [x], {"dims": sorted(int(d) % rank for d in dims), "keepdim": keepdim})
    elif op == "aten.cat.default":
        dim = args[1] if len(args) > 1 else 0
        _set(node, "concat", list(args[0]), {"dim": int(dim) % len(out.shape)})
    elif op == "aten.select.int":
        shape = g.values[x].shape
        dim, index = int(args[1]) % len(shape), int(args[2]) % shape[int(args[1]) % len(shape)]
        sliced = list(shape)
        sliced[dim] = 1
        part = g.add_node("slice", [x], sliced, out.dtype, {"dim": dim, "start": index, "end": index + 1},
                          node.source, name=f"{node.name}_slice", before=node)
        _set(node, "reshape", [part.name], {"shape": list(out.shape)})
    elif op == "aten._log_softmax.default":
        rank = len(g.values[x].shape)
        if int(args[1]) % rank != rank - 1 or (len(args) > 2 and args[2]):
            return False                                  # another axis, or half_to_float
        return _log_softmax(g, node, x)
    elif op == "aten._transformer_encoder_layer_fwd.default":
        return _encoder_layer(g, node, args)
    elif op in SDPA:
        if op == SDPA[1] and node.attrs.get("item") != 0:
            return False
        q, k, v = args[:3]
        names = ("attn_mask", "dropout_p", "is_causal") if op == SDPA[0] else ("dropout_p", "is_causal", "attn_mask")
        given = dict(zip(names, args[3:]), **kw)
        if given.get("dropout_p", 0.0) or given.get("enable_gqa"):
            return False
        mask, causal = given.get("attn_mask"), bool(given.get("is_causal", False))
        qs, ks = g.values[q].shape, g.values[k].shape
        if causal and not mask and qs == ks and qs[-1] <= 128:
            _set(node, "sdpa", [q, k, v], {"causal": True, "scale": given.get("scale")})
        elif not causal:
            return _attention_ops(g, node, q, k, v, mask, given.get("scale"))
        else:
            return False
    elif op == "aten.native_layer_norm.default" and node.attrs.get("item") == 0:
        normalized, w, b, eps = args[1:5]
        if len(normalized) != 1:
            return False
        C = int(normalized[0])
        dtype = np.float32 if out.dtype == "float32" else np.dtype(g.values[x].dtype)
        w = w or g.add_constant(g.fresh(f"{node.name}_ones"), np.ones(C, dtype)).name
        b = b or g.add_constant(g.fresh(f"{node.name}_zeros"), np.zeros(C, dtype)).name
        _set(node, "layer_norm", [x, w, b], {"eps": float(eps)})
    else:
        return False
    return True


def run(g: Graph, options=None) -> Graph:
    count = 0
    for node in list(g.nodes):
        if node.op.startswith("aten."):
            count += _rule(g, node)
    g.meta.setdefault("pass_stats", {})[NAME] = {"rewritten": count}
    return g
