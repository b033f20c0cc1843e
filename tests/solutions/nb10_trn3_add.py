@nki.jit
def residual_add(x, y):
    R, C = x.shape
    P = nl.tile_size.pmax                       # 128 partitions
    # 4 KiB per partition in every DMA: more bytes than one descriptor's fixed time covers on Trn3
    # (100 ns × 33 GB/s = 3.3 KiB), so the bytes per second, not the descriptors, set the time
    F = min(C, 4096 // x.dtype.itemsize)        # 1024 fp32 or 2048 bf16 elements
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // P):
        for j in nl.affine_range(C // F):
            a = nl.load(x[i * P:(i + 1) * P, j * F:(j + 1) * F])      # [128, F]
            b = nl.load(y[i * P:(i + 1) * P, j * F:(j + 1) * F])
            nl.store(out[i * P:(i + 1) * P, j * F:(j + 1) * F], value=nl.add(a, b))
    return out
