"""Moving a whole tensor between HBM and an on-chip tile in one DMA: the first and last step of most test kernels."""
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


def sbuf_copy(hbm, dtype=None):
    """An SBUF tile holding the whole HBM tensor `hbm` (one DMA)."""
    tile = nl.ndarray(hbm.shape, dtype=dtype or hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=hbm)
    return tile


def hbm_copy(tile):
    """A new HBM output holding the on-chip tile `tile` (one DMA)."""
    out = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out
