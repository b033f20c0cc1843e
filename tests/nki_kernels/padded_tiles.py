"""A kernel in AWS's public NKI style that computes on the padding of its tiles and masks it out at
the store (AWS's fused rms-norm + QKV kernel does this with its weights): the padding holds whatever
was in SBUF, which must not be an error as long as it never reaches an output."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def project_with_padded_weights(xT_tensor, w_tensor, mask_the_store=True):
    """out = xT.T @ w for xT [K=128, M=128], w [K, N<512]: w is loaded into a (par_dim(128), 512)
    tile under a column mask, so its columns N..511 are never written; the matmul computes all 512
    columns (garbage in the padding) and the store keeps the first N (mask_the_store=False stores
    all 512 columns into a [M, 512] output: the garbage reaches HBM)."""
    K, M = xT_tensor.shape
    N = w_tensor.shape[1]
    out_tensor = nl.ndarray((M, N if mask_the_store else 512), dtype=nl.float32, buffer=nl.shared_hbm)
    xT = nl.load(xT_tensor)
    w_tile = nl.ndarray((nl.par_dim(K), 512), dtype=w_tensor.dtype, buffer=nl.sbuf)   # [K, 512]
    i_w = nl.mgrid[0:K, 0:512]
    w_tile[i_w.p, i_w.x] = nl.load(w_tensor[i_w.p, i_w.x], mask=(i_w.x < N))
    product = nl.ndarray((nl.par_dim(M), 512), dtype=nl.float32, buffer=nl.psum)     # [M, 512]
    product[...] = nisa.nc_matmul(stationary=xT, moving=w_tile)
    result = nl.copy(product, dtype=nl.float32)
    i_o = nl.mgrid[0:M, 0:512]
    if mask_the_store:
        nl.store(out_tensor[i_o.p, i_o.x], value=result, mask=(i_o.x < N))
    else:
        nl.store(out_tensor, value=result)
    return out_tensor
