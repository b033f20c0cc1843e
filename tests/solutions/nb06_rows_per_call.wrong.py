from trnlab.hardware import presets

spec = presets.core_spec("trn2")
peak, bandwidth = spec.peak_flops("float32"), spec.hbm_bandwidth


def plan_batch(budget_us: float) -> dict:
    # mistake: the roofline alone — the most rows whose FLOPs and bytes fit the budget, as if a call had
    # no fixed costs and the Tensor engine took any number of rows (it takes them in stripes of 128)
    def floor_us(b):
        return max(4 * b * 1024 * 1024 / peak, (8 * 1024 * 1024 + 8 * 1024 + 16 * 1024 * b) / bandwidth) * 1e6

    batch = max(b for b in range(1, 1025) if floor_us(b) <= budget_us)
    return {"batch": batch, "predicted_us": floor_us(batch)}
