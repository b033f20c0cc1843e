def mfu_needed(saving, price_a, peak_a, price_b, peak_b, mfu_b):
    # cost ∝ price / (peak · MFU); want price_a / (peak_a · m) = (1 - saving) · price_b / (peak_b · mfu_b)
    return (price_a / peak_a) / ((1 - saving) * price_b / (peak_b * mfu_b))
