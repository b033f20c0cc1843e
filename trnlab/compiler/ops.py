"""The ops of the graph IR and what each one means, as a PyTorch reference.

Three families live in one graph:

- `aten.*` ops, straight from capture (core ATen, e.g. ``aten.addmm``): `legalise` turns the ones it
  knows into ours; the rest stay and are run by PyTorch itself if they fall back to the host;
- our ops after `legalise` (the names the passes and the lowering speak):
    embedding(table, ids)  add(a, b)  mul(a, b | scalar=)  where(cond, a, b | a_scalar=, b_scalar=)
    broadcast(x, shape=)  reshape(x, shape=)  transpose(x, perm=)  copy(x)  slice(x, dim=, start=, end=)
    matmul(a, b)  batch_matmul(a, b)  layer_norm(x, w, b, eps=)  rms_norm(x, w, eps=)  softmax(x, dim=)
    gelu(x, approximate=)  relu  tanh  sigmoid  silu  convert(x, dtype=)  logical_not(x)
- the ops of students' models (`legalise_nn`, `convolution`; shapes broadcast as in PyTorch):
    sub(a, b | scalar=, reverse=)  div(a, b | scalar=, reverse=)  pow(x, scalar=)  maximum(a, b)
    rsqrt sqrt exp log neg abs  sum(x, dims=, keepdim=)  mean(x, ...)  amax(x, ...)  concat(*xs, dim=)
    conv2d(x, w[, b], stride=, padding=, dilation=, groups=)   NCHW, as nn.Conv2d
    max_pool2d(x, kernel_size=, stride=, padding=)  avg_pool2d(...)   NCHW
    sdpa(q, k, v[, mask], causal=, scale=)   F.scaled_dot_product_attention on [B, H, T, d]
    im2col(x, kernel_size=, stride=, padding=, dilation=)   NHWC -> the windows [N*Ho*Wo, kh*kw*C]
    pool2d(x, kernel_size=, stride=, padding=, mode=)       NHWC pooling (the convolution pass's layout)
- fused ops, made by `fuse` (one kernel each):
    linear(x, w[, bias][, residual], activation=, weight_layout=, residual=)   act(x @ W + bias) [+ residual]
    attention(qkv, n_head=, scale=)                        causal multi-head attention from packed qkv
    decode_attention(qkv, k_cache, v_cache, bias, n_head=)  one new token per sequence against its KV cache
                                                           (captured from the custom op trnlab::decode_attention)

`evaluate(node, inputs)` computes any of them with PyTorch: constant folding, the host fallback, and
the tests all use this one definition.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "silu")
UNARY = ("rsqrt", "sqrt", "exp", "log", "neg", "abs")
REDUCTIONS = ("sum", "mean", "amax")
VIEW_OPS = ("reshape", "copy")                      # free on the device: same bytes, new shape
SHAPE_OPS = ("reshape", "copy", "transpose", "broadcast", "slice")

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                 "int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "float64": torch.float64,
                 "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "complex64": torch.complex64,
                 "complex128": torch.complex128}


def dtype_name(dtype) -> str:
    """'float32', 'bfloat16', ... for a NumPy, ml_dtypes or torch dtype."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    name = np.dtype(dtype).name
    return {"bool_": "bool"}.get(name, name)


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_DTYPES[name]


def to_torch(array: np.ndarray) -> torch.Tensor:
    array = np.asarray(array)
    if dtype_name(array.dtype) == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


# -- aten argument templates (capture writes them, evaluate reads them) ---------------------------------
def encode_arg(a, tensor_index):
    """A plain-data form of an FX argument; `tensor_index(node)` numbers tensor operands."""
    if isinstance(a, (list, tuple)):
        return [encode_arg(x, tensor_index) for x in a]
    if isinstance(a, torch.dtype):
        return {"dtype": dtype_name(a)}
    if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return {"drop": str(a)}
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    index = tensor_index(a)
    if index is None:
        raise TypeError(f"argument {a!r} of type {type(a).__name__} has no plain-data form")
    return {"%": index}


def decode_arg(a, tensors):
    if isinstance(a, list):
        return [decode_arg(x, tensors) for x in a]
    if isinstance(a, dict):
        if "%" in a:
            return tensors[a["%"]]
        if "dtype" in a:
            return torch_dtype(a["dtype"])
        return None
    return a


def _aten(op: str):
    _, name, overload = op.split(".") if op.count(".") == 2 else (*op.split("."), "default")
    return getattr(getattr(torch.ops.aten, name), overload)


# -- references ---------------------------------------------------------------------------------------
def activation(x: torch.Tensor, name: str | None) -> torch.Tensor:
    if name in (None, "none", "identity"):
        return x
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": F.silu}[name](x)


def causal_attention_reference(qkv: torch.Tensor, n_head: int, scale: float | None = None) -> torch.Tensor:
    """qkv [B, T, 3C] (q, k, v side by side, heads inside each) -> y [B, T, C]: causal softmax attention."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = (t.reshape(B, T, n_head, hs).transpose(1, 2) for t in qkv.split(C, dim=2))   # (B, nh, T, hs)
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(hs))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    y = torch.softmax(scores.float(), dim=-1).to(qkv.dtype) @ v                           # (B, nh, T, hs)
    return y.transpose(1, 2).reshape(B, T, C)


def decode_attention_reference(qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, bias: torch.Tensor,
                               n_head: int) -> torch.Tensor:
    """qkv [B, 3C] of the new tokens, k_cache, v_cache [B, L, C] of earlier positions, bias [B, L] (0 or -1e30)
    -> y [B, C]: each new query attends to its cache (masked by bias) and to its own key."""
    B, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = qkv.split(C, dim=1)                                                         # 3 x (B, C)
    heads = lambda t: t.reshape(B, -1, n_head, hs).transpose(1, 2)                         # noqa: E731 (B, nh, L+1, hs)
    all_k = heads(torch.cat([k_cache, k[:, None]], dim=1))                                 # cache, then self
    all_v = heads(torch.cat([v_cache, v[:, None]], dim=1))
    scores = (q.reshape(B, n_head, 1, hs) @ all_k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))   # (B, nh, 1, L+1)
    scores = scores + torch.cat([bias, torch.zeros(B, 1, dtype=bias.dtype)], dim=1)[:, None, None, :]
    return (torch.softmax(scores.float(), dim=-1).to(qkv.dtype) @ all_v).reshape(B, C)


def evaluate(op: str, attrs: dict, inputs: list) -> torch.Tensor:
    """The value of one op from its input tensors (PyTorch, on the host)."""
    a = attrs
    x = inputs[0] if inputs else None
    if op.startswith("aten."):
        args = decode_arg(a.get("args", []), inputs)
        kwargs = {k: decode_arg(v, inputs) for k, v in (a.get("kwargs") or {}).items()}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        out = _aten(op)(*args, **kwargs)
        if "item" in a:
            out = out[a["item"]]
        return out
    if op == "embedding":
        return F.embedding(inputs[1], inputs[0])
    if op == "add":
        return x + a["scalar"] if "scalar" in a else inputs[0] + inputs[1]
    if op == "mul":
        return x * a["scalar"] if "scalar" in a else inputs[0] * inputs[1]
    if op == "where":
        cond = inputs[0]
        rest = list(inputs[1:])
        av = torch.tensor(a["a_scalar"], dtype=rest[0].dtype if rest else torch.float32) if "a_scalar" in a \
            else rest.pop(0)
        bv = torch.tensor(a["b_scalar"], dtype=av.dtype) if "b_scalar" in a else rest.pop(0)
        return torch.where(cond, av, bv)
    if op == "logical_not":
        return ~x
    if op == "broadcast":
        return x.expand(a["shape"])
    if op == "reshape":
        return x.reshape(a["shape"])
    if op == "transpose":
        return x.permute(a["perm"])
    if op == "copy":
        return x.clone()
    if op == "slice":
        index = [slice(None)] * x.dim()
        index[a["dim"]] = slice(a["start"], a["end"], a.get("step", 1))
        return x[tuple(index)]
    if op == "matmul":
        return inputs[0] @ inputs[1]
    if op == "batch_matmul":
        return torch.bmm(inputs[0], inputs[1])
    if op == "layer_norm":
        w = inputs[1] if len(inputs) > 1 else None
        b = inputs[2] if len(inputs) > 2 else None
        return F.layer_norm(x.float(), [x.shape[-1]], w.float() if w is not None else None,
                            b.float() if b is not None else None, a.get("eps", 1e-5)).to(x.dtype)
    if op == "rms_norm":
        return F.rms_norm(x.float(), [x.shape[-1]], inputs[1].float(), a.get("eps", 1e-6)).to(x.dtype)
    if op == "softmax":
        return torch.softmax(x.float(), dim=a.get("dim", -1)).to(x.dtype)
    if op == "gelu":
        return F.gelu(x, approximate=a.get("approximate", "none"))
    if op in ("relu", "tanh", "sigmoid", "silu"):
        return activation(x, op)
    if op == "convert":
        return x.to(torch_dtype(a["dtype"]))
    if op == "linear":
        w = inputs[1]
        w = w.t() if a.get("weight_layout", "in_out") == "out_in" else w
        residual = inputs[-1] if a.get("residual") else None
        bias = inputs[2] if len(inputs) - (residual is not None) > 2 else None
        y = (x.float() @ w.float()) if x.dtype != w.dtype or residual is not None else x @ w
        if bias is not None:
            y = y + bias.to(y.dtype)
        y = activation(y, a.get("activation"))
        if residual is not None:             # added in fp32, rounded once to the residual's dtype
            return (y + residual.float()).to(residual.dtype)
        return y.to(x.dtype)
    if op == "attention":
        return causal_attention_reference(x, a["n_head"], a.get("scale"))
    if op == "decode_attention":
        return decode_attention_reference(*inputs[:4], a["n_head"])
    if op in ("sub", "div", "pow", "maximum", "add", "mul") and ("scalar" in a or len(inputs) == 2):
        return _arithmetic(op, a, inputs)
    if op in UNARY:
        return {"rsqrt": torch.rsqrt, "sqrt": torch.sqrt, "exp": torch.exp, "log": torch.log, "neg": torch.neg,
                "abs": torch.abs}[op](x)
    if op in REDUCTIONS:
        fn = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax}[op]
        return fn(x, dim=list(a["dims"]), keepdim=a.get("keepdim", False))
    if op == "concat":
        return torch.cat(list(inputs), dim=a["dim"])
    if op == "conv2d":
        return F.conv2d(x, inputs[1], inputs[2] if len(inputs) > 2 else None, a["stride"], a["padding"],
                        a["dilation"], a.get("groups", 1))
    if op in ("max_pool2d", "avg_pool2d"):
        pool = F.max_pool2d if op == "max_pool2d" else F.avg_pool2d
        return pool(x, a["kernel_size"], a["stride"], a["padding"])
    if op == "pool2d":                               # NHWC
        pool = F.max_pool2d if a["mode"] == "max" else F.avg_pool2d
        return pool(x.permute(0, 3, 1, 2), a["kernel_size"], a["stride"], a["padding"]).permute(0, 2, 3, 1)
    if op == "im2col":
        return im2col_reference(x, a["kernel_size"], a["stride"], a["padding"], a["dilation"])
    if op == "sdpa":
        mask = inputs[3] if len(inputs) > 3 else None
        return F.scaled_dot_product_attention(inputs[0], inputs[1], inputs[2], attn_mask=mask,
                                              is_causal=a.get("causal", False), scale=a.get("scale"))
    if op == "dropout_mask":
        raise ValueError("dropout_mask draws from the chip's random number generator: it has no host reference")
    if op == "constant":
        raise ValueError("constants are values, not nodes")
    raise KeyError(f"no reference for op {op!r}")


def _arithmetic(op: str, a: dict, inputs: list) -> torch.Tensor:
    """add/sub/mul/div/pow/maximum of two tensors (broadcast) or of a tensor and a number (`scalar`,
    `reverse`: the number on the left)."""
    x = inputs[0]
    other = a["scalar"] if "scalar" in a else inputs[1]
    left, right = (other, x) if a.get("reverse") else (x, other)
    if op == "maximum":
        return torch.maximum(left, right if isinstance(right, torch.Tensor) else torch.tensor(right, dtype=x.dtype))
    fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow}[op]
    if not isinstance(left, torch.Tensor):
        left = torch.tensor(left, dtype=x.dtype)
    return fn(left, right)


def im2col_reference(x: torch.Tensor, kernel_size, stride, padding, dilation) -> torch.Tensor:
    """x [N, H, W, C] -> [N*Ho*Wo, kh*kw*C], columns in (i, j, c) order (what kernels.conv.im2col makes)."""
    N, H, W, C = x.shape
    kh, kw = kernel_size
    cols = F.unfold(x.permute(0, 3, 1, 2), (kh, kw), dilation=dilation, padding=padding, stride=stride)  # [N, C*kh*kw, L]
    L = cols.shape[-1]
    return cols.reshape(N, C, kh * kw, L).permute(0, 3, 2, 1).reshape(N * L, kh * kw * C)
