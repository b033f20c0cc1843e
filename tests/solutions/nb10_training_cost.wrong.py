def training_cost(params, tokens, peak_tflops_per_chip, chips, mfu, usd_per_hour):
    # mistake: counts only the forward pass (2·N·D), forgetting the backward pass
    flops = 2 * params * tokens
    seconds = flops / (chips * peak_tflops_per_chip * 1e12 * mfu)
    return seconds / 3600 * usd_per_hour
