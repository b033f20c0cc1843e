def mfu_needed(saving, price_a, peak_a, price_b, peak_b, mfu_b):
    # mistake: applies the saving to the MFU instead of the cost (multiplies where it must divide)
    return (price_a / peak_a) * (1 - saving) / (price_b / (peak_b * mfu_b))
