"""The AdamW update of one parameter tensor as one fused kernel on the Vector and Scalar engines.

Layout: param, grad, exp_avg, exp_avg_sq [R, C] fp32 (the caller views a parameter of n elements as
[128, n / 128] when 128 divides n, so that all partitions work, else as its own 2-D shape or [1, n]);
`hyper` [3] fp32 holds what changes from step to step, so that one traced program serves every step:

    hyper = [lr, lr / (1 - beta1^t), sqrt(1 - beta2^t)]            (t = the step number, from 1)

and beta1, beta2, eps, weight_decay are compile-time numbers. The update is torch.optim.AdamW's
(decoupled weight decay, Loshchilov & Hutter), in its order of operations:

    param   *= 1 - lr * weight_decay
    exp_avg += (1 - beta1) * (grad - exp_avg)                      (torch's lerp_)
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad^2
    param   -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)

Each [128, <=2048] tile is loaded once (four DMAs), updated in SBUF, and stored once (three DMAs):
the kernel is memory-bound (7 transfers of 4 bytes per parameter for ~12 element-wise operations),
which is why frameworks fuse it. The square root runs on the Scalar engine, everything else on the
Vector engine; the per-step scalars are spread over the partitions once ([128, 3] by a ones matmul).
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import broadcast_rows, load_row, row_tiles

FREE_TILE = 2048                       # elements per partition per instruction


def hyper_values(lr: float, step: int, beta1: float, beta2: float) -> list[float]:
    """The `hyper` row of step `step` (1-based): [lr, lr / bias_correction1, sqrt(bias_correction2)]."""
    return [lr, lr / (1.0 - beta1 ** step), (1.0 - beta2 ** step) ** 0.5]


@nki.jit
def adamw(param, grad, exp_avg, exp_avg_sq, hyper, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
    """One AdamW step of param [R, C] -> (new param, new exp_avg, new exp_avg_sq), each [R, C] fp32."""
    R, C = param.shape
    new_param = nl.ndarray((R, C), dtype=param.dtype, buffer=nl.shared_hbm)
    new_avg = nl.ndarray((R, C), dtype=exp_avg.dtype, buffer=nl.shared_hbm)
    new_avg_sq = nl.ndarray((R, C), dtype=exp_avg_sq.dtype, buffer=nl.shared_hbm)
    P = min(nl.tile_size.pmax, R)
    scalars = broadcast_rows(load_row(hyper), P)                                    # [P, 3] fp32
    lr, step_size, bc2_sqrt = scalars[:, 0:1], scalars[:, 1:2], scalars[:, 2:3]      # [P, 1] each
    # 1 - lr * weight_decay, and -step_size (the update is added)
    decay = nl.add(nl.multiply(lr, -float(weight_decay)), 1.0)                       # [P, 1]
    neg_step = nl.multiply(step_size, -1.0)
    for r0, rows in row_tiles(R):
        for c0, cols in row_tiles(C, FREE_TILE):
            window = (slice(r0, r0 + rows), slice(c0, c0 + cols))
            p = nl.load(param[window])                                              # [rows, cols]
            g = nl.load(grad[window])
            m = nl.load(exp_avg[window])
            v = nl.load(exp_avg_sq[window])
            p = nl.multiply(p, decay[:rows, :], dtype=nl.float32)
            m = nl.add(m, nl.multiply(nl.subtract(g, m), 1.0 - beta1), dtype=nl.float32)
            v = nl.add(nl.multiply(v, beta2), nl.multiply(nl.multiply(g, g), 1.0 - beta2), dtype=nl.float32)
            root = nl.sqrt(v)                                                       # Scalar engine
            denom = nl.add(nl.divide(root, bc2_sqrt[:rows, :]), float(eps))
            update = nl.multiply(nl.divide(m, denom), neg_step[:rows, :])
            p = nl.add(p, update, dtype=param.dtype)
            nl.store(new_param[window], value=p)
            nl.store(new_avg[window], value=m)
            nl.store(new_avg_sq[window], value=v)
    return new_param, new_avg, new_avg_sq


@nki.jit
def squared_norm(x):
    """sum(x^2) of x [R, C] -> [1] fp32: per-row sums (Vector engine), then across partitions (a ones
    matmul on the Tensor engine, accumulated in PSUM): the gradient norm for clipping."""
    R, C = x.shape
    out = nl.ndarray((1,), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.psum)
    for r0, rows in row_tiles(R):
        tile = nl.load(x[r0:r0 + rows, :])
        per_row = nl.sum(nl.multiply(tile, tile, dtype=nl.float32), axis=1, keepdims=True)   # [rows, 1]
        nisa.nc_matmul(dst=total, stationary=nl.ones((rows, 1), dtype=nl.float32), moving=per_row)
    nisa.dma_copy(dst=out, src=nl.copy(total, dtype=nl.float32))
    return out
