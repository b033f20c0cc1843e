"""Kernels in AWS's public NKI style that exercise the shape rules AWS's own kernels rely on:
window sums reduced over several free axes (axis=[-2, -1], masked), per-partition columns t[:, k]
kept 2-D, (P,) reductions meeting (P, 1) accumulators, bn_stats of a partial row tile masked
along F, and double-buffered direct allocations."""
import math

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def window_means(x_tensor, window):
    """[C<=128, H, W] -> [C, H // window * W // window]: the mean of each window x window block,
    one output column per block. The block is loaded whole and summed over its two free axes."""
    C, H, W = x_tensor.shape
    n_h, n_w = H // window, W // window
    out_tensor = nl.ndarray((C, n_h * n_w), dtype=nl.float32, buffer=nl.shared_hbm)
    means = nl.ndarray((C, n_h * n_w), dtype=nl.float32, buffer=nl.sbuf)
    block = nl.ndarray((nl.par_dim(C), window + 1, window + 1), dtype=x_tensor.dtype, buffer=nl.sbuf)
    i_h = nl.arange(window + 1)[None, :, None]
    i_w = nl.arange(window + 1)[None, None, :]
    for bh in nl.static_range(n_h):
        for bw in nl.static_range(n_w):
            nisa.dma_copy(dst=block[:, 0:window, 0:window],
                          src=x_tensor[:, bh * window:(bh + 1) * window, bw * window:(bw + 1) * window])
            total = nl.zeros((C, 1), dtype=nl.float32, buffer=nl.sbuf)          # [C, 1]
            # the block tile is one larger than the window: the mask keeps the window's elements
            partial = nl.sum(block, axis=[-2, -1], mask=((i_h < window) & (i_w < window)))   # [C]
            total[:, :] = total[:, :] + partial                                    # [C, 1] + [C]
            means[:, bh * n_w + bw] = nl.multiply(total, 1.0 / (window * window))  # into a [C, 1] column
    nl.store(out_tensor, value=means)
    return out_tensor


@nki.jit
def shift_by_column(x_tensor, k):
    """out = exp(x - x[:, k]) for a [128, F] tensor: column k of an SBUF tile is a [128, 1] bias."""
    out_tensor = nl.ndarray(x_tensor.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(x_tensor)
    negated = nl.negative(x)
    column = negated[:, k]                       # [128, 1], as on the chip's 2-D memory
    assert tuple(column.shape) == (128, 1)
    nl.store(out_tensor, value=nisa.activation(op=nl.exp, data=x, bias=column[:, 0]))
    return out_tensor


@nki.jit
def row_mean_var(x_tensor):
    """[rows, cols] -> [rows, 2] mean and variance per row with bn_stats / bn_aggr; rows need not be a
    multiple of 128 (the last tile is loaded under a row mask), cols a multiple of bn_stats_fmax
    chunks with a masked remainder."""
    rows, cols = x_tensor.shape
    out_tensor = nl.ndarray((rows, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    fmax = nl.tile_size.bn_stats_fmax
    chunks = math.ceil(cols / fmax)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    i_c = nl.arange(fmax)[None, :]
    i_two = nl.arange(2)[None, :]
    for t in nl.affine_range(math.ceil(rows / 128)):
        row = t * 128 + i_p
        x = nl.load(x_tensor[row, i_f], mask=(row < rows))
        for j in nl.affine_range(chunks):
            # masked along F only: the rows follow the masked load's valid rows
            stats = nisa.bn_stats(x[i_p, j * fmax + i_c], mask=(j * fmax + i_c < cols), dtype=nl.float32)
            mean_var = nisa.bn_aggr(stats)                                       # [128, 2]
            if j == chunks - 1:
                nl.store(out_tensor[row, i_two], value=mean_var[i_p, i_two], mask=(row < rows))
    return out_tensor


@nki.jit
def double_buffered_scale(x_tensor, scale):
    """out = x * scale over [n * 128, F] row tiles, with the kernel's own SBUF placement: the input
    tiles rotate over two physical buffers (ncc.sbuf.mod_alloc num_free_tiles=(2,)), the result tile
    is one fixed address reused every iteration."""
    rows, F = x_tensor.shape
    n = rows // 128
    out_tensor = nl.ndarray((rows, F), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    bytes_per_tile = F * 4
    in_tiles = nl.ndarray((n, nl.par_dim(128), F), dtype=x_tensor.dtype,
                          buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    for i in nl.sequential_range(n):
        nisa.dma_copy(dst=in_tiles[i], src=x_tensor[i * 128:(i + 1) * 128, :])
        scaled = nl.ndarray((nl.par_dim(128), F), dtype=x_tensor.dtype,
                            buffer=ncc.sbuf.mod_alloc(base_addr=2 * bytes_per_tile))
        scaled[...] = nl.multiply(in_tiles[i], scale)
        nisa.dma_copy(dst=out_tensor[i * 128:(i + 1) * 128, :], src=scaled)
    return out_tensor


@nki.jit
def rotation_aliases(x_tensor):
    """Blocks 0 and 2 of a mod_alloc tensor with two physical tiles are the same memory: writing
    block 2 overwrites block 0 (returns what block 0 holds afterwards)."""
    out_tensor = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    blocks = nl.ndarray((3, nl.par_dim(128), x_tensor.shape[1]), dtype=x_tensor.dtype,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    blocks[0] = nl.zeros((128, x_tensor.shape[1]), dtype=x_tensor.dtype)
    nisa.dma_copy(dst=blocks[2], src=x_tensor)
    nisa.dma_copy(dst=out_tensor, src=blocks[0])
    return out_tensor


@nki.jit
def reverse_rows(table):
    """out[b, r, :] = table[b, n - 1 - r, :] for a [B, n, C] HBM tensor: the row indices are computed
    on chip (nisa.iota) and read with one indirect DMA per 128 rows, the last tile masked."""
    B, n, C = table.shape
    out_tensor = nl.ndarray((B, n, C), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(C)[None, :]
    for b in nl.affine_range(B):
        for t in nl.affine_range(math.ceil(n / 128)):
            position = t * 128 + i_p
            ids = nl.subtract(n - 1, nisa.iota(position, dtype=nl.int32), dtype=nl.int32)     # [128, 1]
            rows = nl.load(table[b, ids, i_f], mask=(position < n))
            nl.store(out_tensor[b, position, i_f], value=rows, mask=(position < n))
    return out_tensor


@nki.jit
def rotating_psum_products(a_tensor, b_tensor):
    """out[i] = a[:, i-block].T @ b for 4 column blocks of a [128, 4 * 64] tensor, each product in
    a PSUM tile of a block tensor rotating over 2 banks (ncc.psum.mod_alloc num_bank_tiles=(2,))."""
    K, M4 = a_tensor.shape
    N = b_tensor.shape[1]
    out_tensor = nl.ndarray((4, M4 // 4, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(a_tensor)
    b = nl.load(b_tensor)
    products = nl.ndarray((4, nl.par_dim(M4 // 4), N), dtype=nl.float32,
                          buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
    for i in nl.sequential_range(4):
        products[i] = nisa.nc_matmul(a[:, nl.ds(i * (M4 // 4), M4 // 4)], b)
        nl.store(out_tensor[i], value=nl.copy(products[i]))
    return out_tensor
