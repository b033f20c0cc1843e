from trnlab.hardware import presets


def predict_speedup(flops, hbm_bytes):
    # mistake: the roofline alone, no fixed costs: a tiny kernel is predicted to speed up like a
    # memory-bound one (1.46×), when its time is almost all fixed costs: the runtime's start-up and the
    # DMA start latency (about 1.01×)
    def seconds(core):
        bandwidth = min(core.hbm_bandwidth, core.dma_engines * core.dma_engine_bandwidth)
        return max(flops / core.peak_flops("bfloat16"), hbm_bytes / bandwidth)
    return seconds(presets.CORES["trn2"]) / seconds(presets.CORES["trn3"])
