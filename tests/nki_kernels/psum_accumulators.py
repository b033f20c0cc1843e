"""A kernel that keeps more PSUM accumulators live than PSUM holds in the order it is written (the shape
of AWS's MoE gate/up projection: accumulate every tile in one loop nest, copy them out in another)."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def gate_up(x, w):
    """x [K=128*kt, N=512*nb] (rows: contraction), w [K, 128*it]: out[i][b] = w[:, i].T @ x[:, b]
    accumulated over K in one loop nest, copied out of PSUM in a second (all accumulators live)."""
    K, N = x.shape
    _, I = w.shape
    kt, nb, it = K // 128, N // 512, I // 128
    out = nl.ndarray((it, 128, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = [[nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(it)] for _ in range(nb)]
    xs = [nl.ndarray((128, N), dtype=x.dtype, buffer=nl.sbuf) for _ in range(kt)]
    ws = [nl.ndarray((128, I), dtype=w.dtype, buffer=nl.sbuf) for _ in range(kt)]
    for k in range(kt):
        nisa.dma_copy(dst=xs[k], src=x[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=ws[k], src=w[k * 128:(k + 1) * 128, :])
    for i in range(it):
        for k in range(kt):
            for b in range(nb):
                nisa.nc_matmul(dst=acc[b][i], stationary=ws[k][:, i * 128:(i + 1) * 128], moving=xs[k][:, b * 512:(b + 1) * 512])
    for b in range(nb):
        for i in range(it):
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc[b][i])
            nisa.dma_copy(dst=out[i, :, b * 512:(b + 1) * 512], src=res)
    return out
