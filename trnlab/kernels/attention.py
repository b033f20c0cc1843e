"""Causal multi-head attention, forward (flash-style online softmax) and backward (recomputing the scores).

Layout: q, k, v [B, H, T, d] as trnlab.model.gpt makes them ((B, nh, T, hs) after the head split),
d <= 128; out [B, H, T, d]; lse [B, H, T] fp32 (the log-sum-exp of each query's scaled scores, which
the backward needs). Every (batch, head) pair is processed in turn, its q, k, v loaded while the
previous head computes (common.double_buffered); inside one, queries and keys go in tiles of 128
positions, and each k tile is transposed once per head.

Forward, per query tile i (rows on the partitions), over key tiles j <= i (later ones are all masked):

    s    = scale * q_i @ k_j.T  (+ -1e30 above the diagonal)   qT_i [d, Tq] stationary, kT_j [d, Tk] moving
    m'   = max(m, rowmax(s));  alpha = exp(m - m')            the running max and the rescale of old sums
    p    = exp(s - m');  l = l * alpha + rowsum(p)            one Scalar-engine activation gives p and rowsum
    acc  = acc * alpha + p @ v_j                              pT_j [Tk, Tq] stationary, v_j [Tk, d] moving
    out  = acc / l,  lse = m + log(l)                         (the first key tile sets m, l, acc directly)

so the [T, T] score matrix never exists whole: one [128, 128] block at a time, in PSUM then SBUF.
q and k arrive token-major and are transposed on the Tensor engine (nc_transpose), as is p. Blocks on
the diagonal are masked with nisa.affine_select(query >= key, scores, -1e30), as AWS's kernels do.

Backward (FlashAttention-2 order), per key tile j, over query tiles i >= j, with p recomputed from lse:

    p  = exp(s - lse_i);          dv_j += p.T @ dout_i          (p [Tq, Tk] is already the stationary)
    dp = dout_i @ v_j.T;          ds = p * (dp - D_i) * scale,  D_i = rowsum(dout_i * out_i)
    dk_j += ds.T @ q_i;           dq_i += ds @ k_j              (dsT from one nc_transpose)

dk_j and dv_j accumulate in PSUM over i; dq_i in SBUF (fp32) over j.

`causal_attention_qkv` / `causal_attention_qkv_backward` take the model's own layout instead: the
qkv projection's output [B, T, 3C] and y [B, T, C] with the heads side by side. Each head's [n, d]
block is then a strided DMA of d contiguous columns per row, so no head split or transpose has to
happen in HBM between the qkv linear, attention and the output projection.
"""
from __future__ import annotations

import math

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import double_buffered, row_tiles, transpose_to_sbuf

MASKED = -1.0e30            # scores above the diagonal: exp() of it is exactly 0 in fp32


def _scores(qT, kT, scale: float, q0: int, rows: int, k0: int, cols: int):
    """scale * q @ k.T for one block, causally masked if the block reaches past the diagonal: [rows, cols] fp32."""
    product = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=product, stationary=qT, moving=kT)
    scores = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=scores, op=nl.copy, data=product, scale=scale)              # PSUM -> SBUF, scaled
    if k0 + cols - 1 <= q0:
        return scores                                                               # no key is in the future
    i_q = nl.arange(rows)[:, None]
    i_k = nl.arange(cols)[None, :]
    # keep key k0+i_k for query q0+i_q only if it is not in the future
    return nisa.affine_select(pred=(q0 + i_q >= k0 + i_k), on_true_tile=scores[i_q, i_k],
                              on_false_value=MASKED, dtype=nl.float32)


def _heads(B: int, H: int) -> list[tuple[int, int]]:
    return [(b, h) for b in range(B) for h in range(H)]


def _per_head(x):
    """Blocks of a [B, H, T, d] tensor: (b, h, t0, n) -> the [n, d] rows t0:t0+n of head h of batch b."""
    return lambda b, h, t0, n: x[b, h, t0:t0 + n, :]


def _packed(x, part: int, H: int, d: int):
    """Blocks of a [B, T, parts * H * d] tensor whose columns hold parts (q, k, v) of H heads side by side,
    as nn.Linear writes them: (b, h, t0, n) -> [n, d] (a strided DMA, no transpose in HBM)."""
    column = lambda h: (part * H + h) * d                                            # noqa: E731
    return lambda b, h, t0, n: x[b, t0:t0 + n, column(h):column(h) + d]


def _check_head_size(d: int) -> None:
    if d > nl.tile_size.pmax:
        raise ValueError(f"attention: head size d={d} exceeds {nl.tile_size.pmax} partitions (the contraction "
                         f"of q @ k.T runs over d)")


def _check(q, k, v):
    B, H, T, d = q.shape
    if tuple(k.shape) != (B, H, T, d) or tuple(v.shape) != (B, H, T, d):
        raise ValueError(f"attention: q, k, v must all be [B, H, T, d]; got {q.shape}, {k.shape}, {v.shape}")
    _check_head_size(d)
    return B, H, T, d


def _packed_sizes(qkv, n_head: int):
    B, T, width = qkv.shape
    if width % (3 * n_head):
        raise ValueError(f"attention: qkv has {width} columns, not 3 * n_head * d for n_head={n_head}")
    d = width // (3 * n_head)
    _check_head_size(d)
    return B, T, d


def attention_forward(q_at, k_at, v_at, out_at, lse, B: int, H: int, T: int, d: int, scale: float,
                      return_lse: bool, dtype) -> None:
    """Issue the forward for every head; x_at(b, h, t0, n) gives the HBM block [n, d] of q, k, v, out."""
    tiles = row_tiles(T)                                                            # 128 positions each

    def load(head):
        b, h = head
        return tuple([nl.load(x_at(b, h, t0, n)) for t0, n in tiles] for x_at in (q_at, k_at, v_at))

    for (b, h), (q_tiles, k_tiles, v_tiles) in double_buffered(_heads(B, H), load):
        kT = [transpose_to_sbuf(tile) for tile in k_tiles]                          # [d, n], once per head
        for i in nl.affine_range(len(tiles)):
            q0, rows = tiles[i]
            qT = transpose_to_sbuf(q_tiles[i])                                      # [d, rows]
            neg_max = running_sum = acc = None              # running -max (the exp bias), sum and p @ v
            for j in nl.sequential_range(i + 1):                                    # key tiles up to the diagonal
                k0, cols = tiles[j]
                scores = _scores(qT, kT[j], scale, q0, rows, k0, cols)              # [rows, cols]
                block_neg_max = nisa.tensor_reduce(nl.maximum, scores, axis=1, negate=True, keepdims=True)
                new_neg_max = block_neg_max if j == 0 else nl.minimum(neg_max, block_neg_max)
                probs = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
                block_sum = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=probs, op=nl.exp, data=scores, bias=new_neg_max,
                                reduce_op=nl.add, reduce_res=block_sum)
                probs_T = transpose_to_sbuf(probs, dtype=v_tiles[j].dtype)          # [cols, rows]
                pv = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=pv, stationary=probs_T, moving=v_tiles[j])
                if j == 0:                                  # the first key tile starts the running statistics
                    running_sum, acc = block_sum, nl.copy(pv, dtype=nl.float32)
                else:                                       # later ones rescale them by exp(old max - new max)
                    alpha = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation(dst=alpha, op=nl.exp, data=neg_max, scale=-1.0, bias=new_neg_max)
                    running_sum = nl.add(nl.multiply(running_sum, alpha), block_sum)
                    nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=alpha,
                                              op1=nl.add, operand1=pv)
                neg_max = new_neg_max
            o_tile = nl.multiply(acc, nl.reciprocal(running_sum), dtype=dtype)
            nl.store(out_at(b, h, q0, rows), value=o_tile)
            if return_lse:                                  # lse = max + log(sum)
                nl.store(lse[b, h, q0:q0 + rows], value=nl.subtract(nl.log(running_sum), neg_max))

def attention_backward(q_at, k_at, v_at, o_at, do_at, lse, dq_at, dk_at, dv_at, B: int, H: int, T: int,
                       d: int, scale: float, dtype) -> None:
    """Issue the backward for every head (blocks as in attention_forward; dq_at/dk_at/dv_at are outputs)."""
    tiles = row_tiles(T)

    def load(head):
        b, h = head
        blocks = tuple([nl.load(x_at(b, h, t0, n)) for t0, n in tiles] for x_at in (q_at, k_at, v_at, o_at, do_at))
        lse_columns = []
        for t0, n in tiles:
            column = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=column, src=lse[b, h, t0:t0 + n])
            lse_columns.append(column)
        return blocks + (lse_columns,)

    for (b, h), (q_rows, k_rows, v_rows, o_rows, dout_rows, lse_columns) in double_buffered(_heads(B, H), load):
        # per query tile: the operands every key tile needs, transposed once
        qT = [transpose_to_sbuf(tile) for tile in q_rows]                           # [d, rows]
        doutT = [transpose_to_sbuf(tile) for tile in dout_rows]
        neg_lse = [nl.multiply(column, -1.0) for column in lse_columns]
        delta = [nl.sum(nl.multiply(dout_tile, o_tile, dtype=nl.float32), axis=1, keepdims=True)
                 for dout_tile, o_tile in zip(dout_rows, o_rows)]                   # D_i [rows, 1]
        dq = [nl.zeros((rows, d), dtype=nl.float32) for _, rows in tiles]
        for j in nl.affine_range(len(tiles)):
            k0, cols = tiles[j]
            kT = transpose_to_sbuf(k_rows[j])                                       # [d, cols]
            vT = transpose_to_sbuf(v_rows[j])                                       # [d, cols]
            dv_acc = nl.ndarray((cols, d), dtype=nl.float32, buffer=nl.psum)
            dk_acc = nl.ndarray((cols, d), dtype=nl.float32, buffer=nl.psum)
            for i in nl.sequential_range(j, len(tiles)):                            # query tiles at or after j
                q0, rows = tiles[i]
                scores = _scores(qT[i], kT, scale, q0, rows, k0, cols)              # [rows, cols]
                probs = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=probs, op=nl.exp, data=scores, bias=neg_lse[i])
                probs_lp = nl.copy(probs, dtype=dout_rows[i].dtype)
                nisa.nc_matmul(dst=dv_acc, stationary=probs_lp, moving=dout_rows[i])   # += p.T @ dout_i
                dprobs = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dprobs, stationary=doutT[i], moving=vT)          # dout_i @ v_j.T
                centered = nl.subtract(dprobs, delta[i])                            # dp - D_i
                dscores = nl.ndarray((rows, cols), dtype=q_rows[i].dtype, buffer=nl.sbuf)
                nisa.scalar_tensor_tensor(dst=dscores, data=centered, op0=nl.multiply, operand0=scale,
                                          op1=nl.multiply, operand1=probs)
                nisa.nc_matmul(dst=dk_acc, stationary=dscores, moving=q_rows[i])    # += ds.T @ q_i
                dq_part = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dq_part, stationary=transpose_to_sbuf(dscores), moving=k_rows[j])
                nisa.tensor_tensor(dst=dq[i], data1=dq[i], data2=dq_part, op=nl.add)
            nl.store(dv_at(b, h, k0, cols), value=nl.copy(dv_acc, dtype=dtype))
            nl.store(dk_at(b, h, k0, cols), value=nl.copy(dk_acc, dtype=dtype))
        for i in nl.affine_range(len(tiles)):
            q0, rows = tiles[i]
            nl.store(dq_at(b, h, q0, rows), value=nl.copy(dq[i], dtype=dtype))


def _scale(scale, d: int) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


# -- kernels ---------------------------------------------------------------------------------------
@nki.jit
def causal_attention(q, k, v, scale=None, return_lse=False):
    """softmax(q @ k.T * scale + causal mask) @ v for q, k, v [B, H, T, d] -> out [B, H, T, d]
    (and lse [B, H, T] fp32 with return_lse=True, for causal_attention_backward). scale: 1/sqrt(d)."""
    B, H, T, d = _check(q, k, v)
    out = nl.ndarray((B, H, T, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((B, H, T), dtype=nl.float32, buffer=nl.shared_hbm)
    attention_forward(_per_head(q), _per_head(k), _per_head(v), _per_head(out), lse, B, H, T, d, _scale(scale, d),
                      return_lse, q.dtype)
    return (out, lse) if return_lse else out


@nki.jit
def causal_attention_backward(q, k, v, out, grad_out, lse, scale=None):
    """Gradients of causal_attention: (grad_q, grad_k, grad_v), each [B, H, T, d] in q's dtype.

    out and lse are the forward's outputs (causal_attention(..., return_lse=True))."""
    B, H, T, d = _check(q, k, v)
    grads = [nl.ndarray((B, H, T, d), dtype=q.dtype, buffer=nl.shared_hbm) for _ in range(3)]
    attention_backward(*(_per_head(x) for x in (q, k, v, out, grad_out)), lse, *(_per_head(g) for g in grads),
                       B, H, T, d, _scale(scale, d), q.dtype)
    return tuple(grads)


@nki.jit
def causal_attention_qkv(qkv, n_head, scale=None, return_lse=False):
    """Causal attention straight from the qkv projection of trnlab.model.gpt: qkv [B, T, 3C] (q, k, v side
    by side, n_head heads of d = C / n_head columns within each) -> y [B, T, C] with the heads side by
    side, ready for the output projection (and lse [B, n_head, T] with return_lse=True)."""
    B, T, d = _packed_sizes(qkv, n_head)
    H = int(n_head)
    y = nl.ndarray((B, T, H * d), dtype=qkv.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((B, H, T), dtype=nl.float32, buffer=nl.shared_hbm)
    q_at, k_at, v_at = (_packed(qkv, part, H, d) for part in range(3))
    attention_forward(q_at, k_at, v_at, _packed(y, 0, H, d), lse, B, H, T, d, _scale(scale, d), return_lse,
                      qkv.dtype)
    return (y, lse) if return_lse else y


@nki.jit
def causal_attention_qkv_backward(qkv, y, grad_y, lse, n_head, scale=None):
    """Gradient of causal_attention_qkv with respect to qkv: [B, T, 3C], laid out like qkv."""
    B, T, d = _packed_sizes(qkv, n_head)
    H = int(n_head)
    grad_qkv = nl.ndarray(qkv.shape, dtype=qkv.dtype, buffer=nl.shared_hbm)
    inputs = [_packed(qkv, part, H, d) for part in range(3)] + [_packed(y, 0, H, d), _packed(grad_y, 0, H, d)]
    outputs = [_packed(grad_qkv, part, H, d) for part in range(3)]
    attention_backward(*inputs, lse, *outputs, B, H, T, d, _scale(scale, d), qkv.dtype)
    return grad_qkv
