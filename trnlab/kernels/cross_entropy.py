"""Cross-entropy loss over logits (mean over the targets that count) and its backward.

Layout: logits [R, V] (flatten (B, T, V) -> (B*T, V)), targets [R] int32 (cast torch's int64 with
`.int()`); targets equal to `ignore_index` (-100, as in trnlab.model.gpt) are skipped. The loss comes
back as a [1] tensor (torch returns a 0-d tensor). Rows go on the partitions, 128 per tile, a whole
row of V logits along the free axis (so V is limited by SBUF: a few [128, V] fp32 tiles live at once,
V up to about 8k on Trn2; this course's vocabularies are under 128); math is fp32.

    per row    loss_r = logsumexp(logits_r) - logits_r[target_r]
               (logsumexp = max + log(sum(exp(x - max))); the target logit is sum(logits * one_hot),
               one_hot = (iota == target) built on chip)
    forward    loss = sum_r valid_r * loss_r / sum_r valid_r,        valid_r = (target_r != ignore_index)
    backward   dlogits_r = (softmax(logits_r) - one_hot_r) * valid_r * dloss / sum_r valid_r

The two sums over rows are sums across partitions: ones[rows, 1].T @ [loss * valid, valid] on the
Tensor engine, accumulated over row tiles in one PSUM tile. The backward needs the count before its
first row, so it counts first with ones[rows, 128]: the count lands on all 128 partitions at once.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import (broadcast_rows, double_buffered, load_per_partition, load_row, num_tiles,
                                   row_tiles, tile_extent)


def _class_columns(V: int):
    """[128, V] fp32 tile holding the class index v in column v of every row."""
    columns = nl.ndarray((nl.tile_size.pmax, V), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=columns, pattern=[[1, V]], offset=0, channel_multiplier=0)
    return columns


def _row_softmax_parts(logits_tile, rows: int, V: int):
    """(exps [rows, V] = exp(x - max), row_sum [rows, 1], -max [rows, 1]) of a tile, in fp32."""
    neg_max = nisa.tensor_reduce(nl.maximum, logits_tile, axis=1, negate=True, keepdims=True, dtype=nl.float32)
    exps = nl.ndarray((rows, V), dtype=nl.float32, buffer=nl.sbuf)
    row_sum = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=exps, op=nl.exp, data=logits_tile, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum)
    return exps, row_sum, neg_max


@nki.jit
def cross_entropy(logits, targets, ignore_index=-100):
    """Mean cross-entropy of logits [R, V] against int32 targets [R] -> [1] (F.cross_entropy)."""
    R, V = logits.shape
    loss = nl.ndarray((1,), dtype=nl.float32, buffer=nl.shared_hbm)
    columns = _class_columns(V)
    totals = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.psum)       # [sum of valid losses, valid count]

    def load(tile):
        r0, rows = tile
        # int32 as stored: a cast here would queue on the Vector engine ahead of the current tile's work
        return nl.load(logits[r0:r0 + rows, :]), load_per_partition(targets, r0, rows, dtype=targets.dtype)

    for (r0, rows), (x, target_ids) in double_buffered(row_tiles(R), load):       # [rows, V], [rows, 1]
        target = nl.copy(target_ids, dtype=nl.float32)
        _, row_sum, neg_max = _row_softmax_parts(x, rows, V)
        logsumexp = nl.subtract(nl.log(row_sum), neg_max)                           # [rows, 1]
        one_hot = nl.equal(columns[:rows, :], target)                               # [rows, V]
        picked = nl.sum(nl.multiply(x, one_hot, dtype=nl.float32), axis=1, keepdims=True)   # logits[r, target_r]
        stats = nl.ndarray((rows, 2), dtype=nl.float32, buffer=nl.sbuf)
        stats[:, 1:2] = nl.not_equal(target, float(ignore_index), dtype=nl.float32)  # valid_r
        stats[:, 0:1] = nl.multiply(nl.subtract(logsumexp, picked), stats[:, 1:2])
        nisa.nc_matmul(dst=totals, stationary=nl.ones((rows, 1), dtype=nl.float32), moving=stats)
    summed = nl.copy(totals, dtype=nl.float32)                                      # [1, 2]
    mean = nl.divide(summed[:, 0:1], summed[:, 1:2])                                # [1, 1]
    nisa.dma_copy(dst=loss, src=mean)
    return loss


@nki.jit
def cross_entropy_backward(logits, targets, grad_loss=1.0, ignore_index=-100):
    """d(mean cross-entropy)/d(logits) -> [R, V] in logits' dtype; grad_loss a number or a [1] tensor."""
    R, V = logits.shape
    grad_logits = nl.ndarray((R, V), dtype=logits.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    columns = _class_columns(V)
    # 1. the number of targets that count, on every partition
    count = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.psum)
    valids = []
    for t in nl.affine_range(num_tiles(R, P)):
        r0, rows = tile_extent(t, P, R)
        target = load_per_partition(targets, r0, rows)
        valid = nl.not_equal(target, float(ignore_index), dtype=nl.float32)         # [rows, 1]
        nisa.nc_matmul(dst=count, stationary=nl.ones((rows, P), dtype=nl.float32), moving=valid)
        valids.append((target, valid))
    if isinstance(grad_loss, (int, float)):
        scale = nl.divide(float(grad_loss), count)                                   # [128, 1]
    else:
        upstream = broadcast_rows(load_row(grad_loss, dtype=nl.float32), P)          # [128, 1]
        scale = nl.divide(upstream, count)
    # 2. (softmax - one_hot) * valid * scale, row tile by row tile

    def load(tile):
        r0, rows = tile
        return nl.load(logits[r0:r0 + rows, :])

    for t, ((r0, rows), x) in enumerate(double_buffered(row_tiles(R), load)):
        target, valid = valids[t]
        exps, row_sum, _ = _row_softmax_parts(x, rows, V)
        probs = nl.multiply(exps, nl.reciprocal(row_sum))
        one_hot = nl.equal(columns[:rows, :], target)
        row_scale = nl.multiply(valid, scale[:rows, :])                              # [rows, 1]
        grad = nl.multiply(nl.subtract(probs, one_hot), row_scale, dtype=logits.dtype)
        nl.store(grad_logits[r0:r0 + rows, :], value=grad)
    return grad_logits
