"""Element-wise kernels for the ops students' models are made of: activations, arithmetic with a
number or a tensor (broadcast along rows or columns), reductions along the last axis.

Layout: x [R, C] (the caller flattens leading axes); 128 rows per tile on the partitions, C along the
free axis in pieces of at most 2048. Math is fp32 on chip, the result rounded once to the output dtype.

    unary(x, op, scale)            op(x * scale) on the Scalar engine: relu, sigmoid, tanh, silu, gelu,
                                   gelu_apprx_tanh, exp, log, sqrt, rsqrt, square, abs, negative, copy
    scalar(x, op, value, reverse)  x <op> value (value <op> x if reverse) on the Vector engine:
                                   add, subtract, multiply, divide, power, maximum, minimum
    binary(a, b, op)               a <op> b with b [R, C] (same shape), [R, 1] (one number per row: a
                                   per-partition scalar, no copy) or [1, C] (one row for every row: spread
                                   over the partitions once by a ones-vector matmul)
    reduce_rows(x, op, scale)      [R, C] -> [R, 1]: add (times scale, so a mean is one kernel) or maximum
    relu_backward(y, dy)           dy where y > 0 (y: ReLU's output), else 0
    expand(x [a, b, c], shape)     any broadcast, grouped into three axes (each repeated or not)
    dropout_mask(like, seed, p)    a 0/1 keep mask from the chip's random number generator (nl.random_seed)
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import broadcast_rows, row_tiles

FREE_TILE = 2048                       # elements per partition per instruction
UNARY = ("relu", "sigmoid", "tanh", "silu", "gelu", "gelu_apprx_tanh", "exp", "log", "sqrt", "rsqrt", "square",
         "abs", "negative", "copy")
BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum")


def _tiles(R: int, C: int) -> list:
    return [(rows, cols) for rows in row_tiles(R) for cols in row_tiles(C, FREE_TILE)]


def _check(op: str, known: tuple, kernel: str) -> None:
    if op not in known:
        raise ValueError(f"{kernel}: op {op!r} is not one of {known}")


@nki.jit
def unary(x, op="relu", scale=1.0):
    """op(x * scale) for x [R, C] -> [R, C] in x's dtype: one Scalar-engine activation per tile."""
    _check(op, UNARY, "unary")
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    fn, factor = (nl.copy, -float(scale)) if op == "negative" else (getattr(nl, op), float(scale))
    for (r0, rows), (c0, cols) in _tiles(R, C):
        tile = nl.load(x[r0:r0 + rows, c0:c0 + cols])
        y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=fn, data=tile, scale=factor)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=y)
    return out


@nki.jit
def scalar(x, op="add", value=0.0, reverse=False):
    """x <op> value (or value <op> x) for x [R, C] and a number -> [R, C] in x's dtype."""
    _check(op, BINARY, "scalar")
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for (r0, rows), (c0, cols) in _tiles(R, C):
        tile = nl.load(x[r0:r0 + rows, c0:c0 + cols])
        y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=tile, op0=getattr(nl, op), operand0=float(value), reverse0=bool(reverse))
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=y)
    return out


def _binary_into(out, a, b, fn) -> None:
    """out [R, C] = a [R, C] <fn> b, b [R, C], [R, 1] or [1, C]."""
    R, C = a.shape
    Rb, Cb = b.shape
    if (Rb, Cb) not in ((R, C), (R, 1), (1, C)):
        raise ValueError(f"binary: b {tuple(b.shape)} does not broadcast to a {tuple(a.shape)} "
                         f"(b must be [R, C], [R, 1] or [1, C])")
    spread = None
    if (Rb, Cb) == (1, C) and R > 1:                   # one row for every row: spread it once
        row = nl.ndarray((1, C), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=b)
        spread = broadcast_rows(row, min(nl.tile_size.pmax, R))          # [<=128, C] fp32
    for (r0, rows), (c0, cols) in _tiles(R, C):
        tile = nl.load(a[r0:r0 + rows, c0:c0 + cols])
        if spread is not None:
            other = spread[:rows, c0:c0 + cols]
        elif Cb == 1 and C > 1:                         # one number per row: a per-partition scalar
            other = nl.load(b[r0:r0 + rows, :])
        else:
            other = nl.load(b[r0:r0 + rows, c0:c0 + cols])
        y = nl.ndarray((rows, cols), dtype=out.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=tile, data2=other, op=fn)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=y)


@nki.jit
def binary(a, b, op="add"):
    """a <op> b for a [R, C] and b [R, C], [R, 1] or [1, C] -> [R, C] in a's dtype; or, for a broadcast
    over a middle axis (a per-channel scale of [N, C, H, W]), a [A, R, C] and b [1 or A, R or 1, C or 1],
    one [R, C] slab of a at a time."""
    _check(op, BINARY, "binary")
    out = nl.ndarray(tuple(a.shape), dtype=a.dtype, buffer=nl.shared_hbm)
    fn = getattr(nl, op)
    if len(a.shape) == 2:
        _binary_into(out, a, b, fn)
        return out
    for i in range(a.shape[0]):
        _binary_into(out[i], a[i], b[i if b.shape[0] == a.shape[0] else 0], fn)
    return out


@nki.jit
def reduce_rows(x, op="add", scale=1.0):
    """x [R, C] reduced along each row -> [R, 1] in x's dtype (op: add, times scale; or maximum)."""
    _check(op, ("add", "maximum"), "reduce_rows")
    R, C = x.shape
    out = nl.ndarray((R, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    for r0, rows in row_tiles(R):
        partial = None
        for c0, cols in row_tiles(C, FREE_TILE):
            part = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=part, op=getattr(nl, op), data=nl.load(x[r0:r0 + rows, c0:c0 + cols]), axis=1,
                               keepdims=True)
            partial = part if partial is None else getattr(nl, op)(partial, part, dtype=nl.float32)
        y = nl.ndarray((rows, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.copy, data=partial, scale=float(scale) if op == "add" else 1.0)
        nl.store(out[r0:r0 + rows, :], value=y)
    return out


@nki.jit
def relu_backward(y, grad_y):
    """dx = dy where y > 0, else 0, for y (ReLU's output), dy [R, C] -> [R, C] in dy's dtype."""
    R, C = y.shape
    out = nl.ndarray((R, C), dtype=grad_y.dtype, buffer=nl.shared_hbm)
    for (r0, rows), (c0, cols) in _tiles(R, C):
        positive = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=positive, data=nl.load(y[r0:r0 + rows, c0:c0 + cols]), op0=nl.greater, operand0=0.0)
        dx = nl.ndarray((rows, cols), dtype=grad_y.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dx, data1=positive, data2=nl.load(grad_y[r0:r0 + rows, c0:c0 + cols]), op=nl.multiply)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=dx)
    return out


@nki.jit
def expand(x, shape=(1, 1, 1)):
    """x [a, b, c] -> [A, B, C] with each of a, b, c equal to A, B, C or 1 (repeated): any broadcast,
    its axes grouped into three by the caller. B goes on the partitions, C along the free axis; a row
    repeated over B is spread by a ones-vector matmul, a column over C by a per-partition add."""
    A, B, C = (int(s) for s in shape)
    a, b, c = x.shape
    out = nl.ndarray((A, B, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(A):
        src = x[i if a == A else 0]                                                      # [b, c]
        for r0, rows in row_tiles(B):
            for c0, cols in row_tiles(C, FREE_TILE):
                if b == 1 and B > 1:
                    width = 1 if c == 1 else cols
                    row = nl.ndarray((1, width), dtype=x.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=row, src=src[0:1, 0:1] if c == 1 else src[0:1, c0:c0 + cols])
                    tile = broadcast_rows(row, rows)                                    # [rows, 1 or cols]
                else:
                    tile = nl.load(src[r0:r0 + rows, :] if c == 1 else src[r0:r0 + rows, c0:c0 + cols])
                y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
                if c == 1 and C > 1:                                                    # a number per row
                    nisa.memset(dst=y, value=0.0)
                    nisa.tensor_scalar(dst=y, data=y, op0=nl.add, operand0=tile)
                else:
                    nisa.tensor_copy(dst=y, src=tile)
                nl.store(out[i, r0:r0 + rows, c0:c0 + cols], value=y)
    return out


@nki.jit
def dropout_mask(like, seed, p=0.5):
    """A 0/1 keep mask [R, C] (fp32) shaped like `like` [R, C]: each element 0 with probability p, drawn by
    the chip's random number generator (nisa.dropout on a tile of ones) seeded from seed [1, 1] int32."""
    R, C = like.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(nl.load(seed))
    for (r0, rows), (c0, cols) in _tiles(R, C):
        ones = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        keep = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dropout(dst=keep, data=ones, prob=float(p))
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=keep)
    return out


__all__ = ["unary", "scalar", "binary", "reduce_rows", "relu_backward", "expand", "dropout_mask", "UNARY", "BINARY"]
