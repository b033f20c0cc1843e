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
    out  = acc / l,  lse = m + log(l)

so the [T, T] score matrix never exists whole: one [128, 128] block at a time, in PSUM then SBUF.
q and k arrive token-major and are transposed on the Tensor engine (nc_transpose), as is p. Blocks on
the diagonal are masked with nisa.affine_select(query >= key, scores, -1e30), as AWS's kernels do.

Backward (FlashAttention-2 order), per key tile j, over query tiles i >= j, with p recomputed from lse:

    p  = exp(s - lse_i);          dv_j += p.T @ dout_i          (p [Tq, Tk] is already the stationary)
    dp = dout_i @ v_j.T;          ds = p * (dp - D_i) * scale,  D_i = rowsum(dout_i * out_i)
    dk_j += ds.T @ q_i;           dq_i += ds @ k_j              (dsT from one nc_transpose)

dk_j and dv_j accumulate in PSUM over i; dq_i in SBUF (fp32) over j.
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
    nisa.tensor_scalar(dst=scores, data=product, op0=nl.multiply, operand0=scale)   # PSUM -> SBUF, scaled
    if k0 + cols - 1 <= q0:
        return scores                                                               # no key is in the future
    i_q = nl.arange(rows)[:, None]
    i_k = nl.arange(cols)[None, :]
    # keep key k0+i_k for query q0+i_q only if it is not in the future
    return nisa.affine_select(pred=(q0 + i_q >= k0 + i_k), on_true_tile=scores[i_q, i_k],
                              on_false_value=MASKED, dtype=nl.float32)


def _heads(B: int, H: int) -> list[tuple[int, int]]:
    return [(b, h) for b in range(B) for h in range(H)]


def _check(q, k, v):
    B, H, T, d = q.shape
    if tuple(k.shape) != (B, H, T, d) or tuple(v.shape) != (B, H, T, d):
        raise ValueError(f"attention: q, k, v must all be [B, H, T, d]; got {q.shape}, {k.shape}, {v.shape}")
    if d > nl.tile_size.pmax:
        raise ValueError(f"attention: head size d={d} exceeds {nl.tile_size.pmax} partitions (the contraction "
                         f"of q @ k.T runs over d)")
    return B, H, T, d


@nki.jit
def causal_attention(q, k, v, scale=None, return_lse=False):
    """softmax(q @ k.T * scale + causal mask) @ v for q, k, v [B, H, T, d] -> out [B, H, T, d]
    (and lse [B, H, T] fp32 with return_lse=True, for causal_attention_backward). scale: 1/sqrt(d)."""
    B, H, T, d = _check(q, k, v)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = nl.ndarray((B, H, T, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((B, H, T), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = row_tiles(T)                                                            # 128 positions each

    def load(head):
        b, h = head
        return tuple([nl.load(x[b, h, t0:t0 + n, :]) for t0, n in tiles] for x in (q, k, v))   # [n, d] tiles

    for (b, h), (q_tiles, k_tiles, v_tiles) in double_buffered(_heads(B, H), load):
        kT = [transpose_to_sbuf(tile) for tile in k_tiles]                          # [d, n], once per head
        for i in nl.affine_range(len(tiles)):
            q0, rows = tiles[i]
            qT = transpose_to_sbuf(q_tiles[i])                                      # [d, rows]
            running_max = nl.full((rows, 1), MASKED, dtype=nl.float32)
            running_sum = nl.zeros((rows, 1), dtype=nl.float32)
            acc = nl.zeros((rows, d), dtype=nl.float32)
            for j in nl.sequential_range(i + 1):                                    # key tiles up to the diagonal
                k0, cols = tiles[j]
                scores = _scores(qT, kT[j], scale, q0, rows, k0, cols)              # [rows, cols]
                block_max = nl.max(scores, axis=1, keepdims=True)
                new_max = nl.maximum(running_max, block_max)
                neg_max = nl.multiply(new_max, -1.0)
                alpha = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=alpha, op=nl.exp, data=running_max, bias=neg_max)
                probs = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
                block_sum = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=probs, op=nl.exp, data=scores, bias=neg_max,
                                reduce_op=nl.add, reduce_res=block_sum)
                running_sum = nl.add(nl.multiply(running_sum, alpha), block_sum)
                probs_T = transpose_to_sbuf(probs, dtype=v.dtype)                    # [cols, rows]
                pv = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=pv, stationary=probs_T, moving=v_tiles[j])
                nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=alpha,
                                          op1=nl.add, operand1=pv)
                running_max = new_max
            o_tile = nl.multiply(acc, nl.reciprocal(running_sum), dtype=q.dtype)
            nl.store(out[b, h, q0:q0 + rows, :], value=o_tile)
            if return_lse:
                nl.store(lse[b, h, q0:q0 + rows], value=nl.add(nl.log(running_sum), running_max))
    return (out, lse) if return_lse else out


@nki.jit
def causal_attention_backward(q, k, v, out, grad_out, lse, scale=None):
    """Gradients of causal_attention: (grad_q, grad_k, grad_v), each [B, H, T, d] in q's dtype.

    out and lse are the forward's outputs (causal_attention(..., return_lse=True))."""
    B, H, T, d = _check(q, k, v)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    grad_q = nl.ndarray((B, H, T, d), dtype=q.dtype, buffer=nl.shared_hbm)
    grad_k = nl.ndarray((B, H, T, d), dtype=q.dtype, buffer=nl.shared_hbm)
    grad_v = nl.ndarray((B, H, T, d), dtype=q.dtype, buffer=nl.shared_hbm)
    tiles = row_tiles(T)

    def load(head):
        b, h = head
        blocks = tuple([nl.load(x[b, h, t0:t0 + n, :]) for t0, n in tiles] for x in (q, k, v, out, grad_out))
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
                probs_lp = nl.copy(probs, dtype=q.dtype)
                nisa.nc_matmul(dst=dv_acc, stationary=probs_lp, moving=dout_rows[i])   # += p.T @ dout_i
                dprobs = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dprobs, stationary=doutT[i], moving=vT)          # dout_i @ v_j.T
                centered = nl.subtract(dprobs, delta[i])                            # dp - D_i
                dscores = nl.ndarray((rows, cols), dtype=q.dtype, buffer=nl.sbuf)
                nisa.scalar_tensor_tensor(dst=dscores, data=centered, op0=nl.multiply, operand0=scale,
                                          op1=nl.multiply, operand1=probs)
                nisa.nc_matmul(dst=dk_acc, stationary=dscores, moving=q_rows[i])    # += ds.T @ q_i
                dq_part = nl.ndarray((rows, d), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=dq_part, stationary=transpose_to_sbuf(dscores), moving=k_rows[j])
                nisa.tensor_tensor(dst=dq[i], data1=dq[i], data2=dq_part, op=nl.add)
            nl.store(grad_v[b, h, k0:k0 + cols, :], value=nl.copy(dv_acc, dtype=q.dtype))
            nl.store(grad_k[b, h, k0:k0 + cols, :], value=nl.copy(dk_acc, dtype=q.dtype))
        for i in nl.affine_range(len(tiles)):
            q0, rows = tiles[i]
            nl.store(grad_q[b, h, q0:q0 + rows, :], value=nl.copy(dq[i], dtype=q.dtype))
    return grad_q, grad_k, grad_v
