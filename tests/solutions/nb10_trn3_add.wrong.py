@nki.jit
def residual_add(x, y):
    R, C = x.shape
    P = nl.tile_size.pmax
    # mistake: small tiles, 1 KiB per partition ([128, 256] fp32, [128, 512] bf16), as if only bytes set a
    # DMA's time. Every DMA also takes 478 ns on the core's one issuer, whatever it carries, and its
    # 128 KiB move faster than that (362 ns on Trn2, 248 ns on Trn3): the issuer paces the kernel, on Trn3
    # as on Trn2 (1.00×), 1.7-1.9× slower than the reference there
    F = 1024 // x.dtype.itemsize
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // P):
        for j in nl.affine_range(C // F):
            a = nl.load(x[i * P:(i + 1) * P, j * F:(j + 1) * F])
            b = nl.load(y[i * P:(i + 1) * P, j * F:(j + 1) * F])
            nl.store(out[i * P:(i + 1) * P, j * F:(j + 1) * F], value=nl.add(a, b))
    return out
