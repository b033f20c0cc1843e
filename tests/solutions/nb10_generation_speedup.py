from trnlab.hardware import presets


def core_time_us(flops, hbm_bytes, core):
    # the roofline of one core, its bytes at the rate its 16 DMA engines reach (at most its HBM share),
    # plus the fixed cost of a load and a store that no generation shortens (the DMA start latency)
    bandwidth = min(core.hbm_bandwidth, core.dma_engines * core.dma_engine_bandwidth)
    roof_s = max(flops / core.peak_flops("bfloat16"), hbm_bytes / bandwidth)
    return 2 * core.dma_latency_ns / 1e3 + roof_s * 1e6


def predict_speedup(flops, hbm_bytes):
    return core_time_us(flops, hbm_bytes, presets.CORES["trn2"]) / core_time_us(flops, hbm_bytes, presets.CORES["trn3"])
