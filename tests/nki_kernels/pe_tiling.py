"""Matmuls in the Tensor engine's tiling mode (`nc_matmul(tile_position=, tile_size=)`): several small
matmuls on row / column tiles of the 128 x 128 PE array at once, in AWS's NKI 0.7 style."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def row_tiled_matmuls(lhsT, rhs, rows: int = 32, same_tile: bool = False):
    """out[t] = lhsT[t].T @ rhs[t] for T = 128 // rows small matmuls (lhsT [T, rows, M], rhs [T, rows, N]),
    each on its own `rows`-row tile of the PE array (tile_position (t * rows, 0), tile_size (rows, 128)),
    or all on the first one (`same_tile`)."""
    T, K, M = lhsT.shape
    N = rhs.shape[2]
    out = nl.ndarray((T, M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((T, nl.par_dim(K), M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((T, nl.par_dim(K), N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)             # every operand in SBUF first: the matmuls then wait
    nisa.dma_copy(dst=b, src=rhs)              # only for the PE array
    for t in nl.static_range(T):
        acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a[t], moving=b[t], tile_position=(0 if same_tile else t * rows, 0),
                       tile_size=(rows, 128))
        res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[t], src=res)
    return out


@nki.jit
def whole_array_matmuls(lhsT, rhs):
    """The same products as `row_tiled_matmuls`, each on the whole PE array (no tiling mode)."""
    T, K, M = lhsT.shape
    N = rhs.shape[2]
    out = nl.ndarray((T, M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((T, nl.par_dim(K), M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((T, nl.par_dim(K), N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)             # every operand in SBUF first: the matmuls then wait
    nisa.dma_copy(dst=b, src=rhs)              # only for the PE array
    for t in nl.static_range(T):
        acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a[t], moving=b[t])
        res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[t], src=res)
    return out


@nki.jit
def column_tiled_matmul(lhsT, rhs, column: int = 64, cols: int = 64, rows: int = 128):
    """out = lhsT.T @ rhs on the column tile starting at `column` (tile_size (rows, cols)), e.g. AWS's
    column-tiled decode projections: tile_position (0, column)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b, tile_position=(0, column), tile_size=(rows, cols))
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit(target="trn3")
def mx_matmul_on_row_tile(stationary, stationary_scale, moving, moving_scale, start_row: int = 0,
                          columns: int = 128):
    """The MX product (nisa.nc_matmul_mx) of K = 32 packed rows on the row tile at `start_row`
    (tile_size (32, columns): nc_matmul_mx tiles rows only, so columns must be 128)."""
    tiles = []
    for hbm in (stationary, stationary_scale, moving, moving_scale):
        t = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=hbm)
        tiles.append(t)
    st, st_s, mv, mv_s = tiles
    M, N = st.shape[1], mv.shape[1]
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_s, moving_scale=mv_s,
                      tile_position=(start_row, 0), tile_size=(32, columns))
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out
