def is_memory_bound(flops, hbm_bytes, peak_flops, hbm_bandwidth):
    # below the ridge point (peak / bandwidth), the roof is the memory's: the op waits for bytes
    return flops / hbm_bytes < peak_flops / hbm_bandwidth
