"""Numerically stable row-wise softmax and its backward.

Layout: x [R, C] (flatten leading axes first: (B, nh, T, T) -> (B*nh*T, T)); softmax over the last
axis. Rows go on the partitions in tiles of 128, a whole row along the free axis, so the max and the
sum are free-axis reductions on one engine. The last row tile is masked (`mask=(row < R)`), the form
AWS's compiler needs where loop iterators are symbolic. The next row tile is loaded while this one is
computed (common.double_buffered). Math is fp32 on chip whatever the input dtype; the result is
rounded once to x's dtype.

    forward   y = exp(x - max(x)) / sum(exp(x - max(x)))      (the max keeps exp from overflowing)
    backward  dx = y * (dy - sum(dy * y))                      (takes the forward output y, as autograd does)
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import double_buffered, num_tiles


@nki.jit
def softmax(x):
    """softmax(x [R, C]) over the last axis -> [R, C] in x's dtype."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(C)[None, :]

    def load(t):
        return nl.load(x[t * P + i_p, i_f], mask=(t * P + i_p < R))                 # [128, C]

    for t, scores in double_buffered(range(num_tiles(R, P)), load):
        row = t * P + i_p
        valid = row < R
        neg_max = nisa.tensor_reduce(nl.maximum, scores, axis=1, negate=True, keepdims=True,
                                     dtype=nl.float32, mask=valid)                  # -max [128, 1]
        exps = nl.ndarray((P, C), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        # exp(x - max) and its row sum in one Scalar-engine instruction
        nisa.activation(dst=exps, op=nl.exp, data=scores, bias=neg_max, scale=1.0,
                        reduce_op=nl.add, reduce_res=row_sum, mask=valid)
        inverse = nl.reciprocal(row_sum, mask=valid)
        probs = nl.multiply(exps, inverse, dtype=x.dtype, mask=valid)
        nl.store(out[row, i_f], value=probs, mask=valid)
    return out


@nki.jit
def softmax_backward(y, grad_y):
    """dx = y * (dy - sum(dy * y)) for y = softmax(x) over the last axis of [R, C]."""
    R, C = y.shape
    grad_x = nl.ndarray((R, C), dtype=grad_y.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(C)[None, :]

    def load(t):
        valid = t * P + i_p < R
        return nl.load(y[t * P + i_p, i_f], mask=valid), nl.load(grad_y[t * P + i_p, i_f], mask=valid)

    for t, (probs, grad) in double_buffered(range(num_tiles(R, P)), load):
        row = t * P + i_p
        valid = row < R
        weighted = nl.multiply(grad, probs, dtype=nl.float32, mask=valid)
        dot = nl.sum(weighted, axis=1, keepdims=True, mask=valid)                   # [128, 1]
        centered = nl.subtract(grad, dot, dtype=nl.float32, mask=valid)
        result = nl.multiply(centered, probs, dtype=grad_y.dtype, mask=valid)
        nl.store(grad_x[row, i_f], value=result, mask=valid)
    return grad_x
