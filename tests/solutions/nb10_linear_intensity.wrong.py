def linear_intensity(rows, d_in, d_out, dtype_bytes):
    # mistake: counts the activations but forgets that the weight must be read from HBM too
    flops = 2 * rows * d_in * d_out
    elements = rows * d_in + rows * d_out
    return flops / (elements * dtype_bytes)
