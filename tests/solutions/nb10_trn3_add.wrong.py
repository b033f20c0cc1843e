@nki.jit
def residual_add(x, y):
    R, C = x.shape
    P = nl.tile_size.pmax
    # mistake: tuned on Trn2 to AWS's "at least 2 KiB per partition" ([128, 512] fp32, [128, 1024] bf16).
    # On Trn2 that is within 10 % of the best; on Trn3 a 2 KiB row takes 62 ns of bytes but 100 ns of
    # descriptor, so the kernel runs as fast as on Trn2 (1.00×) and 1.6× slower than the reference
    F = 2048 // x.dtype.itemsize
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // P):
        for j in nl.affine_range(C // F):
            a = nl.load(x[i * P:(i + 1) * P, j * F:(j + 1) * F])
            b = nl.load(y[i * P:(i + 1) * P, j * F:(j + 1) * F])
            nl.store(out[i * P:(i + 1) * P, j * F:(j + 1) * F], value=nl.add(a, b))
    return out
