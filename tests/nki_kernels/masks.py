"""Masks whose clauses relate two iterators: a causal (lower-triangular) copy, an anti-diagonal band."""
import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl


@nki.jit
def lower_triangle_scaled(x):
    """out[i, j] = 2 * x[i, j] where i >= j, 0 elsewhere (x [128, F]); destination style."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    result = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=result, value=0.0)
    i_p, i_f = nl.mgrid[0:P, 0:F]
    nisa.tensor_scalar(dst=result[i_p, i_f], data=tile[i_p, i_f], op0=nl.multiply, operand0=2.0,
                       mask=(i_p >= i_f))
    nl.store(out, value=result)
    return out


@nki.jit
def band_exp(x, width):
    """out[i, j] = exp(x[i, j]) where i + j < width and j < 100, else x (destination style into the
    loaded tile)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(F)[None, :]
    tile = nl.load(x[i_p, i_f])
    nisa.activation(dst=tile[i_p, i_f], op=nl.exp, data=tile[i_p, i_f], mask=(i_p + i_f < width) & (i_f < 100))
    nl.store(out[i_p, i_f], value=tile)
    return out


@nki.jit
def band_exp_functional(x, width):
    """The same band with nl.exp (functional style): refused by name."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:P, 0:F]
    tile = nl.load(x)
    tile[i_p, i_f] = nl.exp(tile[i_p, i_f], mask=(i_p + i_f < width))
    nl.store(out, value=tile)
    return out


@nki.jit
def add_first_n(a_tensor, b_tensor, n):
    """c = a + b on the first n elements (row-major) of [rows, 512] inputs, zeros after: a flat-offset
    mask relating the row and column iterators on nl.load, nl.add and nl.store."""
    rows, cols = a_tensor.shape
    c_tensor = nl.ndarray((rows, cols), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range(rows // 128):
        nl.store(c_tensor[t * 128 + i_p, i_f], value=nl.zeros((128, cols), dtype=a_tensor.dtype))
        flat = (t * 128 + i_p) * cols + i_f
        a = nl.load(a_tensor[t * 128 + i_p, i_f], mask=(flat < n))
        b = nl.load(b_tensor[t * 128 + i_p, i_f], mask=(flat < n))
        c = nl.add(a, b, mask=(flat < n))
        nl.store(c_tensor[t * 128 + i_p, i_f], value=c, mask=(flat < n))
    return c_tensor


@nki.jit
def causal_exp_functional(x):
    """exp below the diagonal with nl.exp (functional): needs the select fallback, refused."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:P, 0:F]
    tile = nl.load(x)
    tile[i_p, i_f] = nl.exp(tile[i_p, i_f], mask=(i_p >= i_f))
    nl.store(out, value=tile)
    return out
