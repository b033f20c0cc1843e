"""Embedding gather (token ids -> rows of a table) and its backward (scatter-add into the table).

Layout: ids [T] int32 (flatten (B, T) first; torch's int64 ids must be cast with `.int()`, trnlab's
HBM has no int64), table [V, C] -> out [T, C]. Tokens go on the partitions, 128 per tile.

Forward: an indirect DMA, as NKI kernels gather rows (AWS's nl.load docs; nkilib's gather kernel):
the ids of a token tile are loaded into SBUF as a [tokens, 1] column, and
``nl.load(table[ids_column, :])`` fetches row ids[t] of the HBM table into partition t, one DMA
descriptor per row. The table never has to fit in SBUF. Ids outside [0, V) raise an out-of-bounds
error (NKI's default oob_mode.error; torch raises too).

Backward: a matmul with a one-hot matrix built on chip (an indirect DMA store cannot add repeated
rows without read-modify-write hazards):

    one_hot[t, v] = (ids[t] == v)          iota of v along the free axis, compared with each partition's id
    dtable[V, C] = one_hot[T, V].T @ dout[T, C]    stationary one_hot [T, V], moving dout [T, C]

Rows of dout whose tokens repeat are summed by the contraction over T, in PSUM, accumulated over
every token tile; the products are x * 1.0 and x * 0.0, so the sums are exact in fp32.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import load_per_partition, num_tiles, row_tiles, tile_extent


def _vocab_columns(V: int):
    """Per vocabulary tile of <= 128 ids: a [128, width] fp32 tile holding v0 + column index on every row."""
    P = nl.tile_size.pmax
    columns = []
    for v in nl.affine_range(num_tiles(V, P)):
        v0, width = tile_extent(v, P, V)
        tile = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(dst=tile, pattern=[[1, width]], offset=v0, channel_multiplier=0)
        columns.append(tile)
    return columns


def _one_hot(ids_column, columns, tokens: int, dtype):
    """[tokens, width] tile of (ids[t] == v) for one vocabulary tile (0.0 / 1.0 in `dtype`)."""
    return nl.equal(columns[:tokens, :], ids_column, dtype=dtype)


@nki.jit
def embedding(ids, table):
    """table[ids]: ids [T] int32, table [V, C] -> [T, C] in table's dtype (one indirect DMA per token tile)."""
    (T,) = ids.shape
    V, C = table.shape
    out = nl.ndarray((T, C), dtype=table.dtype, buffer=nl.shared_hbm)
    token_tiles = row_tiles(T)
    id_columns = [load_per_partition(ids, t0, n, dtype=ids.dtype) for t0, n in token_tiles]  # [tokens, 1] each
    for t in nl.affine_range(len(token_tiles)):
        t0, tokens = token_tiles[t]
        rows = nl.load(table[id_columns[t], :])                                     # [tokens, C] gathered
        nl.store(out[t0:t0 + tokens, :], value=rows)
    return out


@nki.jit
def embedding_backward(ids, grad_out, num_embeddings):
    """Scatter-add: grad_table[v] = sum of grad_out[t] over tokens t with ids[t] == v -> [V, C]."""
    (T,) = ids.shape
    _, C = grad_out.shape
    V = int(num_embeddings)
    grad_table = nl.ndarray((V, C), dtype=grad_out.dtype, buffer=nl.shared_hbm)
    P, TN = nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    columns = _vocab_columns(V)
    token_tiles = row_tiles(T)
    id_columns = [load_per_partition(ids, t0, n, dtype=ids.dtype) for t0, n in token_tiles]  # all loads first
    grads = [nl.load(grad_out[t0:t0 + n, :]) for t0, n in token_tiles]                   # [tokens, C] each
    one_hots = []                                              # per token tile: [tokens, width] per V tile
    for t in nl.affine_range(len(token_tiles)):
        ids_column = nl.copy(id_columns[t], dtype=nl.float32)
        one_hots.append([_one_hot(ids_column, columns[v], token_tiles[t][1], grad_out.dtype)
                         for v in range(len(columns))])
    for v in nl.affine_range(len(columns)):
        v0, width = tile_extent(v, P, V)
        for n in nl.affine_range(num_tiles(C, TN)):
            n0, cols = tile_extent(n, TN, C)
            summed = nl.ndarray((width, cols), dtype=nl.float32, buffer=nl.psum)
            for t in nl.affine_range(len(grads)):
                nisa.nc_matmul(dst=summed, stationary=one_hots[t][v], moving=grads[t][:, n0:n0 + cols])
            nl.store(grad_table[v0:v0 + width, n0:n0 + cols], value=nl.copy(summed, dtype=grad_out.dtype))
    return grad_table
