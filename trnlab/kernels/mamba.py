"""A Mamba (selective state-space) layer as three trnlab.nki kernels: AWS's fused-Mamba lesson, step by step.

AWS's NKI tutorial "Fused Mamba" (Neuron docs, general/nki/tutorials/fused_mamba, "relevant for Inf2,
Trn1, Trn1n"; https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/tutorials/fused_mamba.html)
maps one Mamba-v1 layer onto a NeuronCore and profiles three versions. Inputs (fp32):
delta, u [batch, channels, seq_len]; A [channels, state]; B, C [batch, state, seq_len];
out[b, c, t] = sum over s of C[b, s, t] * h_s[c, t], with the scan h_s[c, t] = exp(delta * A[c, s]) *
h_s[c, t-1] + delta * u * B[b, s, t]. Channels on the partitions, seq_len along the free axis:

- ``mamba_v1``  loops batch > state > channel tile: delta and u are loaded again for every state.
- ``mamba_v2``  loops batch > channel tile > state: delta and u loaded once per channel tile, the
                accumulator is one [128, seq_len] tile per channel tile (the loops reordered and fused).
- ``mamba_v3``  v2 with seq_len in SEQ_TILE chunks inside the state loop; the scan carries its last
                column into the next chunk through `initial`; C * scan is written to PSUM (as AWS's v3).

Per (state, channel tile, chunk) the instructions are the page's: one Scalar-engine `activation`
exp(delta * A) (the multiply folded into the activation's scale), three Vector `tensor_tensor`
multiplies (delta * u, by B, by C; B and C broadcast across partitions on the Tensor engine), one
`tensor_tensor_scan`, one add into the accumulator (`_times_row`: the broadcasts). Our own code, in NKI's functional style.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def _times_row(x, row, ones_row, buffer=nl.sbuf):
    """x [P, T] times row [1, T] broadcast across the partitions. The broadcast is a Tensor-engine matmul
    of a ones column into PSUM (512 columns per matmul, a PSUM bank) and the multiply reads it there:
    no PSUM -> SBUF copy. ASSUMED: what AWS's compiler emits for the page's `B_i.broadcast_to(...)`
    (the page names the TensorE broadcast; `nl.broadcast_to` in trnlab copies it to SBUF)."""
    P, T = x.shape
    width = min(T, nl.tile_size.gemm_moving_fmax)
    out = nl.ndarray((P, T), dtype=x.dtype, buffer=buffer)
    for c0 in range(0, T, width):
        spread = nisa.nc_matmul(ones_row, row[0:1, c0:c0 + width])                     # [P, width] PSUM
        out[0:P, c0:c0 + width] = nisa.tensor_tensor(x[0:P, c0:c0 + width], spread, op=nl.multiply)
    return out


def _state_step(delta_t, u_t, A_col, B_row, C_row, initial, ones_row, scan_C_buffer=nl.sbuf, delta_u=None):
    """One state on one [128, T] chunk: returns (C * scan, scan). A_col [128, 1]; B_row, C_row [1, T].
    scan_C_buffer=nl.psum (v3, as AWS's v3): the product lands in PSUM, so the add into the SBUF
    accumulator has one input in PSUM (N Vector cycles instead of 2N in fp32, [TT-COST]).
    delta_u: delta * u computed once outside the state loop (`HOIST_DELTA_U`), or None: here."""
    delta_A = nisa.activation(op=nl.exp, data=delta_t, scale=A_col)                    # [P, T] ScalarE
    if delta_u is None:
        delta_u = nisa.tensor_tensor(delta_t, u_t, op=nl.multiply)                     # [P, T] VectorE
    delta_Bu = _times_row(delta_u, B_row, ones_row)
    scan = nisa.tensor_tensor_scan(delta_A, delta_Bu, initial=initial, op0=nl.multiply, op1=nl.add)
    return _times_row(scan, C_row, ones_row, scan_C_buffer), scan


@nki.jit
def mamba_v1(delta, u, A, B, C):
    """Loop order batch > state > channel tile (delta, u reloaded per state)."""
    batch, channels, seq_len = delta.shape
    state_size = A.shape[1]
    P = nl.tile_size.pmax
    n_tiles = channels // P
    assert channels % P == 0, f"channels={channels} must be a multiple of {P}"
    out = nl.ndarray((batch, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones_row = nl.ones((1, P), dtype=delta.dtype, buffer=nl.sbuf)        # [K=1, M=128]: the broadcast's stationary
    for b in nl.affine_range(batch):
        acc = nl.zeros((n_tiles, nl.par_dim(P), seq_len), dtype=delta.dtype, buffer=nl.sbuf)
        for s in nl.affine_range(state_size):
            for t in nl.affine_range(n_tiles):
                ch = slice(t * P, (t + 1) * P)
                delta_t = nl.load(delta[b, ch, 0:seq_len])                  # [128 channels, seq_len]
                u_t = nl.load(u[b, ch, 0:seq_len])
                A_col = nl.load(A[ch, s:s + 1])                             # [128, 1]
                B_row = nl.load(B[b, s:s + 1, 0:seq_len])                   # [1, seq_len]
                C_row = nl.load(C[b, s:s + 1, 0:seq_len])
                scan_C, _ = _state_step(delta_t, u_t, A_col, B_row, C_row, 0.0, ones_row)
                acc[t, 0:P, 0:seq_len] += scan_C
        for t in nl.affine_range(n_tiles):
            nl.store(out[b, t * P:(t + 1) * P, 0:seq_len], acc[t, 0:P, 0:seq_len])
    return out


@nki.jit
def mamba_v2(delta, u, A, B, C, HOIST_DELTA_U: bool = False):
    """Loop order batch > channel tile > state: delta and u loaded once per channel tile.

    HOIST_DELTA_U: delta * u (the same in every state) computed once per channel tile, before the
    state loop, as a compiler's loop-invariant code motion would (the page's code computes it inside;
    docs/calibration.md, candidate `hoist`). Off by default: the kernel as the page writes it."""
    batch, channels, seq_len = delta.shape
    state_size = A.shape[1]
    P = nl.tile_size.pmax
    assert channels % P == 0, f"channels={channels} must be a multiple of {P}"
    out = nl.ndarray((batch, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones_row = nl.ones((1, P), dtype=delta.dtype, buffer=nl.sbuf)        # [K=1, M=128]: the broadcast's stationary
    for b in nl.affine_range(batch):
        for t in nl.affine_range(channels // P):
            ch = slice(t * P, (t + 1) * P)
            acc = nl.zeros((nl.par_dim(P), seq_len), dtype=delta.dtype, buffer=nl.sbuf)
            delta_t = nl.load(delta[b, ch, 0:seq_len])
            u_t = nl.load(u[b, ch, 0:seq_len])
            delta_u = nisa.tensor_tensor(delta_t, u_t, op=nl.multiply) if HOIST_DELTA_U else None
            for s in nl.affine_range(state_size):
                A_col = nl.load(A[ch, s:s + 1])
                B_row = nl.load(B[b, s:s + 1, 0:seq_len])
                C_row = nl.load(C[b, s:s + 1, 0:seq_len])
                scan_C, _ = _state_step(delta_t, u_t, A_col, B_row, C_row, 0.0, ones_row, delta_u=delta_u)
                acc[0:P, 0:seq_len] += scan_C
            nl.store(out[b, ch, 0:seq_len], acc[0:P, 0:seq_len])
    return out


@nki.jit
def mamba_v3(delta, u, A, B, C, SEQ_TILE: int = 512):
    """v2 with seq_len cut in SEQ_TILE chunks (innermost); the scan's last column seeds the next chunk."""
    batch, channels, seq_len = delta.shape
    state_size = A.shape[1]
    P = nl.tile_size.pmax
    assert channels % P == 0, f"channels={channels} must be a multiple of {P}"
    assert seq_len % SEQ_TILE == 0, f"seq_len={seq_len} must be a multiple of SEQ_TILE={SEQ_TILE}"
    out = nl.ndarray((batch, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones_row = nl.ones((1, P), dtype=delta.dtype, buffer=nl.sbuf)        # [K=1, M=128]: the broadcast's stationary
    for b in nl.affine_range(batch):
        for t in nl.affine_range(channels // P):
            ch = slice(t * P, (t + 1) * P)
            acc = nl.zeros((nl.par_dim(P), seq_len), dtype=delta.dtype, buffer=nl.sbuf)
            delta_t = nl.load(delta[b, ch, 0:seq_len])
            u_t = nl.load(u[b, ch, 0:seq_len])
            for s in nl.affine_range(state_size):
                A_col = nl.load(A[ch, s:s + 1])
                carry = nl.zeros((nl.par_dim(P), 1), dtype=delta.dtype, buffer=nl.sbuf)   # h[:, -1] = 0
                for k in nl.sequential_range(seq_len // SEQ_TILE):
                    cols = slice(k * SEQ_TILE, (k + 1) * SEQ_TILE)
                    B_row = nl.load(B[b, s:s + 1, cols])
                    C_row = nl.load(C[b, s:s + 1, cols])
                    scan_C, scan = _state_step(delta_t[0:P, cols], u_t[0:P, cols], A_col, B_row, C_row, carry,
                                                ones_row, scan_C_buffer=nl.psum)
                    carry[0:P, 0:1] = nl.copy(scan[0:P, SEQ_TILE - 1:SEQ_TILE])
                    acc[0:P, cols] += scan_C
            nl.store(out[b, ch, 0:seq_len], acc[0:P, 0:seq_len])
    return out


def reference(delta, u, A, B, C):
    """NumPy: the layer the three kernels compute (the scan in float64)."""
    import numpy as np
    batch, channels, seq_len = delta.shape
    out = np.zeros((batch, channels, seq_len))
    for s in range(A.shape[1]):
        dA = np.exp(delta * A[None, :, s, None])
        dBu = delta * u * B[:, None, s, :]
        h = np.zeros((batch, channels))
        for i in range(seq_len):
            h = dA[..., i] * h + dBu[..., i]
            out[..., i] += C[:, None, s, i] * h
    return out
