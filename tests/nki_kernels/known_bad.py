"""Known-bad NKI kernels, each with its good twin: the oracle corpus (docs/oracle.md).

Kernels of our own in AWS's NKI 0.7 style (beta-2 `nki.isa` destination style mostly). Each bad
kernel breaks one hardware or language rule on the line marked `# BAD`; its good twin differs in
that one line (marked `# GOOD`) and runs. trnlab stops each bad kernel with the error class named in
its docstring, pointing at the marked line. What AWS's CPU simulator (`nki.simulate`) does with it is
in the docstring too ("not checked" where AWS's page says so, "not documented" otherwise).
"""
import numpy as np

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def _load(hbm, dtype=None):
    """An SBUF tile holding the whole HBM tensor `hbm` (one DMA)."""
    tile = nl.ndarray(hbm.shape, dtype=dtype or hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=hbm)
    return tile


def _store(tile):
    """A new HBM output holding the SBUF tile `tile`."""
    out = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def _out_of_psum(acc):
    """PSUM [M, N] -> SBUF -> a new HBM output (PSUM cannot go to HBM directly)."""
    result = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    return _store(result)


# --- PSUM accumulation ----------------------------------------------------------------------------

@nki.jit
def accumulate_into_uninitialised_psum(a, b):
    """UninitializedReadError. nc_matmul(accumulate=True) adds to what a fresh PSUM tile holds:
    garbage. AWS's simulator allocates each tensor with values of its own; not documented."""
    st, mv = _load(a), _load(b)                                     # [K=128, M=128], [K=128, N=512]
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv, accumulate=True)  # BAD
    return _out_of_psum(acc)


@nki.jit
def accumulate_into_uninitialised_psum_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv, accumulate=False)  # GOOD
    return _out_of_psum(acc)


@nki.jit
def overlapping_psum_accumulation_groups(a, b):
    """DirectAllocationOverlapError. Two accumulation groups, interleaved over K, placed on the same
    PSUM bank: each adds into the other's partial sums. AWS's simulator allocates each tensor
    independently "without simulating overlapping memory regions": not checked."""
    st, mv = _load(a), _load(b)                                     # [K=256 as 2 x 128, 128], [.., 512]
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))  # BAD
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
    return _store(total)


@nki.jit
def overlapping_psum_accumulation_groups_good(a, b):
    st, mv = _load(a), _load(b)
    first = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=1))  # GOOD
    for k in nl.sequential_range(2):
        nisa.nc_matmul(dst=first, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
        nisa.nc_matmul(dst=second, stationary=st[:, nl.ds(k * 128, 128)], moving=mv)
    total = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=first, data2=second, op=nl.add)
    return _store(total)


@nki.jit
def psum_tile_over_one_bank(a, b):
    """PSUMBankError. A matmul result of [128, 1024] fp32 (4 KiB per partition) spans two 2 KiB PSUM
    banks; an accumulation group lives in one bank. AWS's simulator: not documented."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)  # BAD
    nisa.nc_matmul(dst=acc[:, 0:512], stationary=st, moving=mv)
    return _out_of_psum(acc[:, 0:512])


@nki.jit
def psum_tile_over_one_bank_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # GOOD
    nisa.nc_matmul(dst=acc[:, 0:512], stationary=st, moving=mv)
    return _out_of_psum(acc[:, 0:512])


@nki.jit
def matmul_into_bf16_sbuf(a, b):
    """MemoryPlacementError. The Tensor engine writes its result to PSUM only. AWS's simulator:
    not documented."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)  # BAD
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return _store(acc)


@nki.jit
def matmul_into_bf16_sbuf_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # GOOD
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return _out_of_psum(acc)


@nki.jit
def matmul_into_int32_psum(a, b):
    """DtypeError. nc_matmul accumulates fp32 (or bf16) in PSUM; an int32 result tile is refused.
    AWS's simulator: not documented."""
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.psum)  # BAD
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return _out_of_psum(acc)


@nki.jit
def matmul_into_int32_psum_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # GOOD
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return _out_of_psum(acc)


@nki.jit
def matmul_moving_over_512(a, b):
    """MatmulShapeError. The moving tile's free size is at most 512 (N <= 512). AWS's simulator:
    not documented."""
    st, mv = _load(a), _load(b)                                     # mv [128, 1024]
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)  # BAD
    return _out_of_psum(acc)


@nki.jit
def matmul_moving_over_512_good(a, b):
    st, mv = _load(a), _load(b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv[:, 0:512])  # GOOD
    return _out_of_psum(acc)
