"""2-D average pooling with an access pattern that groups each pool window into trailing axes."""
import trnlab.nki as nki
import trnlab.nki.language as nl


@nki.jit
def avgpool2d(in_tensor, pool_size):
    """in_tensor [C, H, W] (C <= 128 channels on partitions) -> [C, H / pool, W / pool]."""
    channels, height, width = in_tensor.shape
    out_h, out_w = height // pool_size, width // pool_size
    out_tensor = nl.ndarray((channels, out_h, out_w), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    in_tile = nl.load(in_tensor)                                        # [C, H, W]
    # a 5-D view [C, out_h, out_w, pool, pool] of the tile: window (r, c) at (i_h * pool + r, i_w * pool + c)
    i_c, i_h, i_w, i_r, i_s = nl.mgrid[0:channels, 0:out_h, 0:out_w, 0:pool_size, 0:pool_size]
    windows = in_tile[i_c, i_h * pool_size + i_r, i_w * pool_size + i_s]
    window_sum = nl.sum(windows, axis=[3, 4])                           # [C, out_h, out_w]
    out_tile = nl.multiply(window_sum, 1.0 / (pool_size * pool_size), dtype=in_tensor.dtype)
    nl.store(out_tensor, value=out_tile)
    return out_tensor
