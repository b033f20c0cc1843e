def sbuf_bytes_per_partition(K, block_m, block_n, dtype_bytes):
    # mistake: total bytes spread evenly over 128 partitions, as if memory were one flat array
    total = K * block_m * dtype_bytes + K * block_n * dtype_bytes + block_m * block_n * 4
    return total / 128
