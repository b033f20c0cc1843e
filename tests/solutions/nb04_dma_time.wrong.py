def dma_time_ns(rows, cols, dtype_bytes):
    spec = presets.TRN2.core
    # mistake: bandwidth only — the fixed cost of a DMA is forgotten
    return rows * cols * dtype_bytes / spec.hbm_bandwidth * 1e9
