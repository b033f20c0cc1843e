"""Attention for one decode step: each sequence's new query against its KV cache and its own key.

In decode every sequence of the batch brings one new token. Its query must look at the keys and
values of all its earlier tokens, which the KV cache holds, and at its own; there is no [T, T] score
matrix any more, only one score row per (sequence, head).

Layout (the model's own, heads side by side, as `causal_attention_qkv`):

    qkv      [B, 3C]   the qkv projection of the new tokens: q, k_new, v_new side by side
    k_cache  [B, L, C] keys of the earlier positions 0..L-1 (read only)
    v_cache  [B, L, C] values, likewise
    bias     [B, L]    fp32 added to the cached scores: 0 where the sequence has a position, -1e30 after
    y        [B, C]    the attention output, ready for the output projection

The cache is only read: the new token's key and value come from qkv, and the caller appends them
to the cache after the step (k_new, v_new are columns C:3C of qkv). So a decode program has no
in-place write to HBM, and its outputs are the logits and the new cache rows.
L is the cache bucket (a power of two), the same for every sequence of the batch; shorter sequences
are masked by `bias`. The mask is an input (data), not a trace-time constant, so one compiled decode
program per (batch bucket, cache bucket) serves every mix of lengths, as a compiled Neuron decode
graph takes its attention mask as an input.

Per sequence b (its K and V blocks loaded while the previous sequence computes) and head h:

    qT, kT_new  [d, 1]         DMA of d columns of qkv onto d partitions
    kT          [d, Lt]        per key tile of <= 128 positions: the K block [Lt, d] transposed on the Tensor engine
    s  [1, L+1] = scale * qT.T @ [kT | kT_new] + [bias | 0]   (stationary qT, moving kT: one PSUM row)
    p  [1, L+1] = exp(s - max(s)), l = sum(p)                 one Scalar-engine activation gives p and l
    o  [1, d]   = sum over key tiles of pT_t.T @ V_t + p_new * v_new   (accumulated in PSUM)
    y[b, h]     = o / l

Only one partition of the score row is busy: decode does little arithmetic per byte of cache it
reads, which is why it is memory-bound (notebook 09 puts it on the roofline). L + 1 <= 512 (one PSUM
bank of fp32 scores).
"""
from __future__ import annotations

import math

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import double_buffered, row_tiles, transpose_to_sbuf

MASKED = -1.0e30           # bias past a sequence's end: exp() of it is exactly 0 in fp32


def _sizes(qkv, k_cache, v_cache, bias, n_head: int) -> tuple[int, int, int, int]:
    B, width = qkv.shape
    Bk, L, C = k_cache.shape
    if width != 3 * C or Bk != B:
        raise ValueError(f"decode_attention: qkv must be [B, 3C] for k_cache [B, L, C] = {tuple(k_cache.shape)}; "
                         f"got qkv {tuple(qkv.shape)}")
    if tuple(v_cache.shape) != (B, L, C) or tuple(bias.shape) != (B, L):
        raise ValueError(f"decode_attention: v_cache must be [B, L, C] = {(B, L, C)} and bias [B, L] = {(B, L)}; "
                         f"got {tuple(v_cache.shape)} and {tuple(bias.shape)}")
    if C % n_head:
        raise ValueError(f"decode_attention: C={C} is not a multiple of n_head={n_head}")
    d = C // n_head
    if d > nl.tile_size.pmax:
        raise ValueError(f"decode_attention: head size d={d} exceeds {nl.tile_size.pmax} partitions")
    if L + 1 > nl.tile_size.gemm_moving_fmax:
        raise ValueError(f"decode_attention: cache length L={L} plus the new token exceeds "
                         f"{nl.tile_size.gemm_moving_fmax} scores (one PSUM bank of fp32)")
    return B, L, C, d


def _column(qkv, b: int, c0: int, d: int):
    """Columns c0:c0+d of row b of qkv as a [d, 1] tile (one element per partition)."""
    column = nl.ndarray((d, 1), dtype=qkv.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=column, src=qkv[b, c0:c0 + d])
    return column


@nki.jit
def decode_attention(qkv, k_cache, v_cache, bias, n_head, scale=None):
    """softmax(q @ [K; k_new].T * scale + [bias, 0]) @ [V; v_new] for one new token per sequence:
    qkv [B, 3C], k_cache and v_cache [B, L, C], bias [B, L] fp32 -> y [B, C] (heads side by side).
    scale: 1/sqrt(d)."""
    H = int(n_head)
    B, L, C, d = _sizes(qkv, k_cache, v_cache, bias, H)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    y = nl.ndarray((B, C), dtype=qkv.dtype, buffer=nl.shared_hbm)
    key_tiles = row_tiles(L)                                                        # <= 128 positions each

    def load(b):
        keys = [nl.load(k_cache[b, k0:k0 + n, :]) for k0, n in key_tiles]           # [n, C] each
        values = [nl.load(v_cache[b, k0:k0 + n, :]) for k0, n in key_tiles]
        bias_row = nl.load(bias[b:b + 1, :])                                        # [1, L]
        queries = [_column(qkv, b, h * d, d) for h in range(H)]                     # [d, 1] per head
        new_keys = [_column(qkv, b, C + h * d, d) for h in range(H)]                # [d, 1] per head
        new_values = nl.load(qkv[b:b + 1, 2 * C:3 * C])                             # [1, C]
        return keys, values, bias_row, queries, new_keys, new_values

    for b, (keys, values, bias_row, queries, new_keys, new_values) in double_buffered(range(B), load):
        for h in nl.affine_range(H):
            c0 = h * d
            product = nl.ndarray((1, L + 1), dtype=nl.float32, buffer=nl.psum)
            for t, (k0, n) in enumerate(key_tiles):                                # q . k for each cached key
                kT = transpose_to_sbuf(keys[t][:, c0:c0 + d])                       # [d, n]
                nisa.nc_matmul(dst=product[:, k0:k0 + n], stationary=queries[h], moving=kT)
            nisa.nc_matmul(dst=product[:, L:L + 1], stationary=queries[h], moving=new_keys[h])   # q . k_new
            scores = nl.ndarray((1, L + 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=scores[:, 0:L], data=product[:, 0:L], op0=nl.multiply, operand0=scale,
                                      op1=nl.add, operand1=bias_row)                # PSUM -> SBUF, scaled, masked
            nisa.activation(dst=scores[:, L:L + 1], op=nl.copy, data=product[:, L:L + 1], scale=scale)
            neg_max = nisa.tensor_reduce(nl.maximum, scores, axis=1, negate=True, keepdims=True)   # [1, 1]
            probs = nl.ndarray((1, L + 1), dtype=nl.float32, buffer=nl.sbuf)
            total = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=probs, op=nl.exp, data=scores, bias=neg_max, reduce_op=nl.add, reduce_res=total)
            out = nl.ndarray((1, d), dtype=nl.float32, buffer=nl.psum)
            for t, (k0, n) in enumerate(key_tiles):                                # p @ V, accumulated in PSUM
                probs_T = transpose_to_sbuf(probs[:, k0:k0 + n], dtype=values[t].dtype)   # [n, 1]
                nisa.nc_matmul(dst=out, stationary=probs_T, moving=values[t][:, c0:c0 + d])
            p_new = nl.copy(probs[:, L:L + 1], dtype=new_values.dtype)              # [1, 1]: K=1, M=1
            nisa.nc_matmul(dst=out, stationary=p_new, moving=new_values[:, c0:c0 + d])   # + p_new * v_new
            nl.store(y[b:b + 1, c0:c0 + d], value=nl.multiply(out, nl.reciprocal(total), dtype=qkv.dtype))
    return y
