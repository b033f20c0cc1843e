def psum_tiles_that_fit(tile_n):
    spec = presets.TRN2.core
    # mistake: PSUM treated as one pool of bytes, ignoring banks
    return spec.psum_partition_bytes // (tile_n * 4)
