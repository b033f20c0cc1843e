def dma_time_ns(rows, cols, dtype_bytes):
    spec = presets.TRN2.core
    engines = min(spec.dma_engines, -(-rows // 8))     # one DMA engine per 8 partitions
    rows_per_engine = -(-rows // engines)
    # one descriptor per row: its bytes at the engine's rate, but never less than the descriptor time
    row_ns = max(cols * dtype_bytes / spec.dma_engine_bandwidth * 1e9, spec.dma_descriptor_ns)
    hbm_ns = rows * cols * dtype_bytes / spec.hbm_bandwidth * 1e9
    return spec.dma_latency_ns + max(rows_per_engine * row_ns, hbm_ns)
