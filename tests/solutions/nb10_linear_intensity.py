def linear_intensity(rows, d_in, d_out, dtype_bytes):
    flops = 2 * rows * d_in * d_out
    elements = rows * d_in + d_in * d_out + d_out + rows * d_out   # x, W, b read; y written
    return flops / (elements * dtype_bytes)
