def psum_tiles_that_fit(tile_n):
    spec = presets.TRN2.core
    tile_bytes = tile_n * 4  # fp32 accumulators, per partition
    per_bank = spec.psum_bank_bytes // tile_bytes  # a matmul result lies in one bank
    return per_bank * spec.psum_banks
