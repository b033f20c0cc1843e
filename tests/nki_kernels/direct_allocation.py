"""Kernels in AWS's public NKI style that place their own tiles (nki.compiler direct allocation):
PSUM banks reused by tiles of different shapes one after the other, the same banks used by two
tiles at once (a kernel bug), an accumulation group per logical tile of a rotating PSUM block
tensor, and a PSUM block tensor larger than PSUM."""
import functools

import numpy as np

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from tests.nki_kernels.fusion import score_blocks


@nki.jit
def transpose_then_product(x_tensor, w_tensor):
    """out = sum over i of x_i @ w for x [128, 4 * 128] (x_i: its i-th 128-column block), w [128, 512]:
    first the four blocks are transposed through PSUM banks 0-3 (a (4, par_dim(128), 128) fp32 block tensor, one tile per
    bank), then the product is accumulated in bank 0 again as a (par_dim(128), 512) tile — another
    shape on the same bytes, live only after the transposes' last read."""
    K, M4 = x_tensor.shape
    N = w_tensor.shape[1]
    out_tensor = nl.ndarray((K, N), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((nl.par_dim(K), M4), dtype=x_tensor.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    w = nl.ndarray((nl.par_dim(K), N), dtype=w_tensor.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    identity = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    x_t = nl.ndarray((4, nl.par_dim(128), K), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(
        base_addr=8704, num_free_tiles=(4,)))
    result = nl.ndarray((nl.par_dim(K), N), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=10752))
    # [4 x (128 partitions, 128 fp32)], banks 0..3
    blocks_t = nl.ndarray((4, nl.par_dim(128), K), dtype=nl.float32,
                          buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(4,)))
    # [128 partitions, 512 fp32]: all of bank 0
    product = nl.ndarray((nl.par_dim(K), N), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))

    nisa.dma_copy(dst=x, src=x_tensor)
    nisa.dma_copy(dst=w, src=w_tensor)
    identity[...] = nl.load(nl.shared_constant(np.identity(128, dtype=np.float32), dtype=nl.float32))
    for i in nl.sequential_range(4):
        blocks_t[i] = nisa.nc_matmul(stationary=x[:, nl.ds(i * 128, 128)], moving=identity)
        x_t[i] = nisa.tensor_copy(blocks_t[i])
    for i in nl.sequential_range(4):
        product[...] += nisa.nc_matmul(stationary=x_t[i], moving=w)      # x_t[i].T @ w = x_i @ w
    result[...] = nisa.tensor_copy(product)
    nisa.dma_copy(dst=out_tensor, src=result)
    return out_tensor


@nki.jit
def two_live_tiles_on_one_bank(a_tensor, b_tensor):
    """A kernel bug: `first` (bank 0) is still to be read when `second`, placed on bank 0 too, is
    written — on the chip the second matmul overwrites the first's result."""
    K, N = a_tensor.shape
    out_tensor = nl.ndarray((K, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(a_tensor)
    b = nl.load(b_tensor)
    first = nl.ndarray((nl.par_dim(K), N), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    second = nl.ndarray((nl.par_dim(K), N // 2), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    first[...] = nisa.nc_matmul(stationary=a[:, 0:K], moving=b)
    second[...] = nisa.nc_matmul(stationary=a[:, 0:K], moving=b[:, 0:N // 2])
    total = nl.add(nl.copy(first[:, 0:N // 2]), nl.copy(second))
    nl.store(out_tensor[:, 0:N // 2], value=total)
    nl.store(out_tensor[:, N // 2:N], value=nl.copy(first[:, N // 2:N]))
    return out_tensor


@nki.jit
def row_block_products(a_tensor, b_tensor):
    """out[i-block] = sum over k of a[k-block, i-block].T @ b[k-block] for a [4 * 128, 4 * 128],
    b [4 * 128, 256]: the four row blocks' accumulators are the logical tiles of one PSUM block
    tensor on a single bank (ncc.psum.mod_alloc num_bank_tiles=(1,)), so each reuses the bytes of
    the previous one; each logical tile's first `+=` starts its own accumulation group."""
    K4, M4 = a_tensor.shape
    N = b_tensor.shape[1]
    out_tensor = nl.ndarray((M4, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M4 // 128, nl.par_dim(128), N), dtype=nl.float32,
                     buffer=ncc.psum.mod_alloc(base_bank=3, num_bank_tiles=(1,)))
    for i in nl.sequential_range(M4 // 128):
        for k in nl.sequential_range(K4 // 128):
            a = nl.load(a_tensor[nl.ds(k * 128, 128), nl.ds(i * 128, 128)])
            b = nl.load(b_tensor[nl.ds(k * 128, 128), :])
            acc[i] += nisa.nc_matmul(stationary=a, moving=b)
        nl.store(out_tensor[nl.ds(i * 128, 128), :], value=nl.copy(acc[i]))
    return out_tensor


@nki.jit
def all_products_then_reduce(q_tensor, k_tensor):
    """Every [128, 512] block of q.T @ k into one PSUM block tensor first, then a second loop takes
    each row's maximum: at s = 1024, 8 x 2 tiles of 2 KiB (32 KiB per partition), the block tensor
    is twice PSUM's 16 KiB, as in AWS's attention tutorial step 3 (it runs with the loops fused)."""
    d, s = q_tensor.shape
    out_tensor = nl.ndarray((s, s // 512), dtype=nl.float32, buffer=nl.shared_hbm)
    qk = score_blocks(q_tensor, k_tensor)                 # the producer loop of tests/nki_kernels/fusion.py
    for i in nl.affine_range(s // 128):
        row_max = nl.ndarray((nl.par_dim(128), s // 512), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(s // 512):
            row_max[:, j] = nisa.tensor_reduce(op=nl.max, data=qk[i, j], axis=1)
        nl.store(out_tensor[nl.ds(i * 128, 128), :], value=row_max)
    return out_tensor


@nki.jit
def scale_with_an_address_counter(x_tensor, scale):
    """out = x * scale over [n * 128, F] row tiles, each tile declared in the loop body at the
    kernel's own address counter, which the body advances: NKI traces the body once, so every
    iteration uses the first address (the counter grows past SBUF if run per iteration)."""
    rows, F = x_tensor.shape
    out_tensor = nl.ndarray((rows, F), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    address = 0
    for i in nl.affine_range(rows // 128):
        row_tile = nl.ndarray((nl.par_dim(128), F), dtype=x_tensor.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=address))
        address += F * 4
        nisa.dma_copy(dst=row_tile, src=x_tensor[nl.ds(i * 128, 128), :])
        scaled = nl.ndarray((nl.par_dim(128), F), dtype=x_tensor.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=address))
        address += F * 4
        scaled[...] = nl.multiply(row_tile, scale)
        nisa.dma_copy(dst=out_tensor[nl.ds(i * 128, 128), :], src=scaled)
    return out_tensor


def _bank_of(idx, pdim_size, fdim_size, banks):
    """ncc.psum.alloc's function: block idx -> (bank, start partition, byte offset in the bank)."""
    return (banks[tuple(idx)], 0, 0)


@nki.jit
def products_on_chosen_banks(a_tensor, b_tensor):
    """out[g] = a[:, g-block].T @ b for two column blocks, the two PSUM tiles of one block tensor on
    banks 1 and 5 (ncc.psum.alloc with a function of the block index), not side by side."""
    K, M2 = a_tensor.shape
    N = b_tensor.shape[1]
    out_tensor = nl.ndarray((2, M2 // 2, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(a_tensor)
    b = nl.load(b_tensor)
    products = nl.ndarray((2, nl.par_dim(M2 // 2), N), dtype=nl.float32,
                          buffer=ncc.psum.alloc(functools.partial(_bank_of, banks={(0,): 1, (1,): 5})))
    for g in nl.affine_range(2):
        products[g] = nisa.nc_matmul(stationary=a[:, nl.ds(g * (M2 // 2), M2 // 2)], moving=b)
        nl.store(out_tensor[g], value=nl.copy(products[g]))
    return out_tensor
