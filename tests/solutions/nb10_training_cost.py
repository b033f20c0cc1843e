def training_cost(params, tokens, peak_tflops_per_chip, chips, mfu, usd_per_hour):
    flops = 6 * params * tokens                                   # forward 2·N·D + backward 4·N·D
    seconds = flops / (chips * peak_tflops_per_chip * 1e12 * mfu)  # the share of the peak the model reaches
    return seconds / 3600 * usd_per_hour
