"""Causal attention for short sequences: several sequences of one head share the 128 partitions.

    causal_attention_qkv_packed(qkv [B, T, 3C], n_head, scale) -> y [B, T, C]      T = 32 or 64, B >= 2

`attention.causal_attention_qkv` works on one (batch, head) pair at a time. With the tiny GPT's T = 32
positions each of its tiles fills 32 of the 128 partitions and each matmul streams 32 columns, so at
batch 64 the kernel issues ~19 instructions per pair (19,456 for the model's 4 layers), almost all
of them far below the engines' efficient sizes. Here G = 128 // T consecutive sequences of the same
head go into one tile: the sequences are consecutive rows of qkv seen as [B*T, 3C], so one DMA of
whole rows ([G*T, 3C], q, k and v of every head) feeds all heads of G sequences, each head's q, k, v
a column slice of that tile, and one [G*T, G*T] score block holds all G sequences' scores. The heads'
outputs meet in one [G*T, C] tile, stored with one DMA of whole rows. (Per-head DMAs of d = 16
columns would move 64-byte pieces, far below the DMA's efficient size.) At batch 64 that is 869
instructions per layer instead of 4,864. A query must not see the keys of the other sequences in the
tile, so the scores get a block-diagonal causal mask (0 or -1e30), built once per kernel call:

    mask[i, j] = 0      if j <= i and j is in i's sequence  (j >= T * (i // T))
               = -1e30  otherwise

    s   = scale * q @ k.T + mask      one scalar_tensor_tensor, PSUM -> SBUF (Vector engine)
    p   = exp(s - rowmax(s))          one Scalar-engine activation, which also sums each row
    out = (p @ v) * (1 / rowsum(p))   pT [keys, queries] stationary, v [keys, d] moving

The masked entries are exactly 0 after the exp, so each sequence's softmax and p @ v are those of
the per-pair kernel; the extra products (other sequences' keys) cost Tensor-engine columns, not
accuracy. A whole sequence fits one tile (T <= 64), so the online softmax of the general kernel
has a single key tile and needs no running rescale.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.attention import MASKED, _packed_sizes, _scale
from trnlab.kernels.common import double_buffered, transpose_to_sbuf

PACKED_SEQ_LENS = (32, 64)        # T: 128 // T sequences per tile, each starting on a legal partition (0/32/64/96)


def packable(B: int, T: int) -> bool:
    """Does packing pay and is it legal: at least two sequences per tile, each on a legal start partition."""
    return T in PACKED_SEQ_LENS and B >= 2


def block_causal_mask(n: int, T: int):
    """[n, n] fp32 SBUF tile: 0 where key j may be seen by query i (same sequence of T positions, j <= i),
    else MASKED. One affine_select over the tile for j <= i, then one per later sequence for its rows'
    keys before the sequence start (beta-2 form: the predicate j - r0 >= 0 over a [T, n] row block)."""
    i_q = nl.arange(n)[:, None]
    i_k = nl.arange(n)[None, :]
    zeros = nl.zeros((n, n), dtype=nl.float32)
    mask = nisa.affine_select(pred=(i_q >= i_k), on_true_tile=zeros[i_q, i_k], on_false_value=MASKED,
                              dtype=nl.float32)                                     # [n, n]: j <= i
    for r0 in range(T, n, T):                                                       # sequence starting at row r0
        rows = mask[r0:r0 + T, :]                                                   # [T, n]
        nisa.affine_select(rows, [[1, n]], -r0, 0, rows, MASKED, cmp_op=nl.greater_equal)   # j >= r0
    return mask


@nki.jit
def causal_attention_qkv_packed(qkv, n_head, scale=None):
    """causal_attention_qkv for T = 32 or 64 and B >= 2, 128 // T sequences of a head per tile:
    qkv [B, T, 3C] (q, k, v side by side, n_head heads of d = C / n_head columns each) -> y [B, T, C]."""
    B, T, d = _packed_sizes(qkv, n_head)
    if not packable(B, T):
        raise ValueError(f"causal_attention_qkv_packed: T={T} must be one of {PACKED_SEQ_LENS} and B={B} >= 2 "
                         f"(use attention.causal_attention_qkv)")
    H = int(n_head)
    C = H * d
    scale = _scale(scale, d)
    G = min(nl.tile_size.pmax // T, B)                                              # sequences per tile
    y = nl.ndarray((B, T, C), dtype=qkv.dtype, buffer=nl.shared_hbm)
    rows_in = qkv.reshape((B * T, 3 * C))                                           # sequences as row blocks
    rows_out = y.reshape((B * T, C))
    mask = block_causal_mask(G * T, T)                                              # [G*T, G*T]
    blocks = [(b0, min(G, B - b0)) for b0 in range(0, B, G)]

    def load(block):                          # q, k, v of every head of G sequences: one DMA of whole rows
        b0, g = block
        return nl.load(rows_in[b0 * T:(b0 + g) * T, :])                             # [n, 3C]

    for (b0, g), rows in double_buffered(blocks, load):
        n = g * T
        out = nl.ndarray((n, C), dtype=qkv.dtype, buffer=nl.sbuf)                   # every head's output
        for h in nl.affine_range(H):
            q, k, v = (rows[:, (part * H + h) * d:(part * H + h + 1) * d] for part in range(3))   # [n, d] each
            qT = transpose_to_sbuf(q)                                               # [d, n]
            kT = transpose_to_sbuf(k)                                               # [d, n]
            product = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=product, stationary=qT, moving=kT)                   # q @ k.T [n, n]
            scores = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=scores, data=product, op0=nl.multiply, operand0=scale, op1=nl.add,
                                      operand1=mask[:n, :n])                        # scaled + masked
            neg_max = nisa.tensor_reduce(nl.maximum, scores, axis=1, negate=True, keepdims=True)   # [n, 1]
            probs = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.sbuf)
            row_sum = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=probs, op=nl.exp, data=scores, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum)
            probs_T = transpose_to_sbuf(probs, dtype=v.dtype)                       # [n keys, n queries]
            pv = nl.ndarray((n, d), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=pv, stationary=probs_T, moving=v)                    # p @ v [n, d]
            out[:, h * d:(h + 1) * d] = nl.multiply(pv, nl.reciprocal(row_sum), dtype=qkv.dtype)
        nl.store(rows_out[b0 * T:b0 * T + n, :], value=out)                         # [n, C]: one DMA of whole rows
    return y
