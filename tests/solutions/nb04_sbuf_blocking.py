def sbuf_bytes_per_partition(K, block_m, block_n, dtype_bytes):
    k_tiles = math.ceil(K / 128)  # K runs along the partitions, 128 at a time
    lhsT = k_tiles * block_m * dtype_bytes  # each K tile holds block_m values per partition
    rhs = k_tiles * block_n * dtype_bytes
    out = math.ceil(block_m / 128) * block_n * 4  # the output block, fp32, block_m along partitions
    return lhsT + rhs + out
