"""Kernels with NKI 0.7's compiled loops (nl.fori_loop, nl.while_loop) and beta 1's nl.dynamic_range."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def column_block_sums_fori(x):
    """out[:, 0] = sum over the [128, 512] column blocks of x [128, n*512], accumulated in SBUF by a
    fori_loop body (state carried through memory, the body returns nothing)."""
    P, F = x.shape
    out = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)

    def body(i):
        block = nl.ndarray((P, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=block, src=x[:, nl.ds(i * 512, 512)])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=block, op=nl.add)

    nl.fori_loop(0, F // 512, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def halvings_while(x, times):
    """x / 2**times, one halving per while_loop iteration (the condition counts down to 0)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)

    def body(remaining):
        t[...] = nl.multiply(t, 0.5)
        return remaining - 1

    nl.while_loop(times, body)
    nl.store(out, value=t)
    return out


@nki.jit
def every_other_block_dynamic(x):
    """Copies blocks 0, 2, 4, ... of x [128, n*128] into out (others zero) with nl.dynamic_range."""
    P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.zeros((P, 128), dtype=x.dtype)
    for j in nl.affine_range(F // 128):
        nl.store(out[:, nl.ds(j * 128, 128)], value=zero)
    for j in nl.dynamic_range(0, F // 128, 2):
        nl.store(out[:, nl.ds(j * 128, 128)], value=nl.load(x[:, nl.ds(j * 128, 128)]))
    return out
