def dma_time_ns(rows, cols, dtype_bytes):
    spec = presets.TRN2.core
    engines = min(rows, spec.dma_engines)  # a transfer is spread over its rows, at most 16 engines
    rate = min(engines * spec.dma_engine_bandwidth, spec.hbm_bandwidth)  # bytes/s
    return spec.dma_latency_ns + rows * cols * dtype_bytes / rate * 1e9
