def is_memory_bound(flops, hbm_bytes, peak_flops, hbm_bandwidth):
    # a typical mistake: "a lot of FLOPs means compute-bound", ignoring the bytes and the ridge point
    return flops < 1e7
