"""Element-wise addition: a single-tile kernel, a tiled kernel with masks, and an SPMD kernel."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def add_single_tile(a_tensor, b_tensor):
    """c = a + b for inputs of at most [128, 512] (functional style)."""
    c_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    a = nl.load(a_tensor)
    b = nl.load(b_tensor)
    c = a + b
    nl.store(c_tensor, value=c)
    return c_tensor


@nki.jit
def add_tiled(a_tensor, b_tensor):
    """c = a + b for any [rows, cols]: 128-row tiles; the last one masked (access patterns + mask=)."""
    rows, cols = a_tensor.shape
    c_tensor = nl.ndarray((rows, cols), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        row = t * nl.tile_size.pmax + i_p
        a_tile = nl.load(a_tensor[row, i_f], mask=(row < rows))
        b_tile = nl.load(b_tensor[row, i_f], mask=(row < rows))
        c_tile = nl.add(a_tile, b_tile, mask=(row < rows))
        nl.store(c_tensor[row, i_f], value=c_tile, mask=(row < rows))
    return c_tensor


@nki.jit
def add_spmd(a_tensor, b_tensor):
    """Launch as add_spmd[rows // 128, cols // 512](a, b): each program adds one [128, 512] tile."""
    c_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    tile_rows, tile_cols = 128, 512
    row = nl.program_id(0) * tile_rows
    col = nl.program_id(1) * tile_cols
    a_tile = nl.ndarray((tile_rows, tile_cols), dtype=a_tensor.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray((tile_rows, tile_cols), dtype=b_tensor.dtype, buffer=nl.sbuf)
    c_tile = nl.ndarray((tile_rows, tile_cols), dtype=a_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a_tensor[row:row + tile_rows, col:col + tile_cols])
    nisa.dma_copy(dst=b_tile, src=b_tensor[row:row + tile_rows, col:col + tile_cols])
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
    nisa.dma_copy(dst=c_tensor[row:row + tile_rows, col:col + tile_cols], src=c_tile)
    return c_tensor
