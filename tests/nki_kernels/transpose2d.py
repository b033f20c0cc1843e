"""2-D transpose: within a tile through the Tensor engine, and of a large matrix tile by tile."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def transpose_tile(x_tensor):
    """[P, F] -> [F, P] for P, F <= 128 (functional style: nl.transpose returns a PSUM tile)."""
    rows, cols = x_tensor.shape
    out_tensor = nl.ndarray((cols, rows), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    x_tile = nl.load(x_tensor)
    transposed_psum = nl.transpose(x_tile)
    transposed = nl.copy(transposed_psum, dtype=x_tensor.dtype)
    nl.store(out_tensor, value=transposed)
    return out_tensor


@nki.jit
def transpose_tiled(x_tensor):
    """[M, N] -> [N, M] for M, N multiples of 128 (destination style, nisa.nc_transpose per tile)."""
    rows, cols = x_tensor.shape
    tile = nl.tile_size.pmax
    out_tensor = nl.ndarray((cols, rows), dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // tile):
        for j in nl.affine_range(cols // tile):
            x_tile = nl.ndarray((tile, tile), dtype=x_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x_tile, src=x_tensor[i * tile:(i + 1) * tile, j * tile:(j + 1) * tile])
            t_psum = nl.ndarray((tile, tile), dtype=x_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=t_psum, data=x_tile)
            t_sbuf = nl.ndarray((tile, tile), dtype=x_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=t_sbuf, src=t_psum)
            nisa.dma_copy(dst=out_tensor[j * tile:(j + 1) * tile, i * tile:(i + 1) * tile], src=t_sbuf)
    return out_tensor
