"""Kernels of our own, in AWS's NKI 0.7 style, that read tensors through views (`slice`, `select`,
`permute`, `broadcast`, `rearrange`, ...) and access patterns (`.ap`, with `scalar_offset` /
`vector_offset` for indirect DMAs)."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def permuted_load(x):
    """out[b, a, c] = x[a, b, c]: an HBM view with its first two dims swapped, moved by one DMA."""
    A, B, C = x.shape
    out = nl.ndarray((B, A, C), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((B, A, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x.permute((1, 0, 2)))
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def on_chip_views(x):
    """From one [P, 64] SBUF tile: every other column (slice), the columns regrouped [P, 16, 4] and read
    [P, 4, 16] (reshape_dim + permute), column 5 repeated 8 times (select + expand_dim + broadcast) and
    the einops view "p (a b) -> p b a" (rearrange), each copied out by the Vector engine."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    odd = nl.ndarray((P, F // 2), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=odd, src=tile.slice(1, 1, F, 2))
    turned = nl.ndarray((P, 4, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=turned, src=tile.reshape_dim(1, (16, 4)).permute((0, 2, 1)))
    column = nl.ndarray((P, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=column, src=tile.select(1, 5).expand_dim(1).broadcast(1, 8))
    swapped = nl.ndarray((P, 8, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=swapped, src=tile.rearrange("p (a b) -> p b a", a=8))
    outs = []
    for t in (odd, turned, column, swapped):
        out = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        outs.append(out)
    return tuple(outs)


@nki.jit
def pattern_then_index(x):
    """t.ap(...)[...]: the [P, 4, 16] pattern of a [P, 64] tile's columns read with stride 4 (columns
    j, j + 4, ...), then rows 0..63 and pattern rows 1..2 of it."""
    P, F = x.shape
    tile = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    part = tile.ap([[F, P], [1, 4], [4, 16]])[0:64, 1:3]       # [64, 2, 16]
    out = nl.ndarray((64, 2, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    res = nl.ndarray((64, 2, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=part)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def dynamic_expert(table, expert):
    """out = table[e] for e read at run time from HBM `expert` ([1, 1] int32): `.ap(scalar_offset=)` on
    indirect_dim 0 of an [E, R, C] table (AWS's MoE kernels pick an expert's weights this way)."""
    E, R, C = table.shape
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=expert)
    rows = nl.ndarray((R, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap(pattern=[[C, R], [1, C]], offset=0, scalar_offset=idx, indirect_dim=0))
    out = nl.ndarray((R, C), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


@nki.jit
def selected_expert(table, expert):
    """The same as `dynamic_expert` through the view method: table.select(0, idx)."""
    E, R, C = table.shape
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=expert)
    rows = nl.ndarray((R, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.select(0, idx))
    out = nl.ndarray((R, C), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


@nki.jit
def gather_rows(table, ids):
    """out[p] = table[ids[p]]: `.ap(vector_offset=)`, one row offset per partition (an indirect DMA)."""
    N, C = table.shape
    P = ids.shape[0]
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((P, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[C, P], [1, C]], offset=0, vector_offset=idx, indirect_dim=0))
    out = nl.ndarray((P, C), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


@nki.jit
def scatter_rows(table, ids, values):
    """out = table with out[ids[p]] = values[p]: a vector_offset on the destination (a scatter); values of
    another dtype are cast by that indirect DMA."""
    N, C = table.shape
    P = ids.shape[0]
    out = nl.ndarray((N, C), dtype=table.dtype, buffer=nl.shared_hbm)
    whole = nl.ndarray((N, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=whole, src=table)
    nisa.dma_copy(dst=out, src=whole)
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((P, C), dtype=values.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=values)
    nisa.dma_copy(dst=out.ap([[C, P], [1, C]], vector_offset=idx, indirect_dim=0), src=rows)
    return out


@nki.jit
def transpose_dma(x):
    """nisa.dma_transpose of a 3-d ([A, B, C] -> [C, B, A]) or 4-d ([A, B, C, D] -> [D, B, C, A]) HBM
    tensor into SBUF, the permutations AWS's dma_transpose page lists."""
    axes = (2, 1, 0) if x.ndim == 3 else (3, 1, 2, 0)
    shape = tuple(x.shape[a] for a in axes)
    tile = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=x, axes=axes)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def constant_from_file(x, path):
    """out = x + the constant saved at `path` (a .npy file: nl.shared_constant's file form)."""
    P, F = x.shape
    const = nl.shared_constant(path)
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=const)
    total = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=a, data2=b, op=nl.add)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=total)
    return out


@nki.jit
def optional_bias(x, bias=None):
    """out = x (+ bias if given): `if bias:` tests that the optional tensor was passed."""
    P, F = x.shape
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    if bias:
        b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=bias)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


@nki.jit
def gather_transpose(table, ids):
    """AWS's indirect transpose: rows table[ids[p]] ([F, C], ids [128, N] read column by column for
    F = 128 N rows) transposed into SBUF [C, F] by nisa.dma_transpose of a vector_offset pattern."""
    T, C = table.shape
    P, N = ids.shape
    F = P * N
    idx = nl.ndarray((P, N), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    tile = nl.ndarray((C, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=table.ap(pattern=[[C, F], [1, C]], vector_offset=idx, indirect_dim=0),
                       axes=(1, 0))
    out = nl.ndarray((C, F), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out
