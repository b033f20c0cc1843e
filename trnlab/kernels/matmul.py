"""Tiled matrix multiplication for any shape, the fused linear layer, and their backward kernels.

Layouts (HBM, PyTorch's row-major order):

    matmul(a, b)                 a [M, K], b [K, N]                    -> a @ b          [M, N]
    matmul_lhsT(lhsT, rhs)       lhsT [K, M], rhs [K, N]               -> lhsT.T @ rhs   [M, N]
    linear(x, weight, bias, act) x [M, K], weight [K, N], bias [N]     -> act(x @ weight + bias)
                                 (weight_layout="out_in": weight [N, K] as nn.Linear stores it)
    matmul_backward(a, b, g)     -> (g @ b.T [M, K], a.T @ g [K, N])
    linear_backward(x, w, g)     -> (g @ w.T [M, K], x.T @ g [K, N], g summed over rows [N])

Why these layouts. The Tensor engine computes dst[M, N] = stationary[K, M].T @ moving[K, N]: both
operands need the contraction axis K on the partitions. `rhs`/`weight` [K, N] is a moving operand as it
lies in HBM. Activations arrive token-major ([M tokens, K features]), so the kernel transposes each
[128, 128] block of `a` on the Tensor engine (nc_transpose, as nl.matmul does without transpose_x)
once per output row stripe and reuses it for every N tile. The weight of a linear layer is taken as
[in, out] = `nn.Linear.weight.T` by default: a compiler transposes a constant weight once, not at
every call, and the weight gradient x.T @ g comes out in the same [in, out] layout with no transpose
at all (x [M, K] is already the stationary operand of a contraction over M). weight_layout="out_in"
takes nn.Linear's own [out, in] (the lm_head that shares the token table [V, C]); the forward then
transposes weight tiles on chip, the backward needs none. `matmul_lhsT` is the layout of
AWS's matmul tutorial, for callers that hold the transposed operand already.

Tiling: output tiles of [128 rows, 512 columns] (one PSUM bank of fp32); K in tiles of 128
partitions accumulated in PSUM. The K tiles of one 128-row stripe of a are loaded (and transposed)
once and reused for every N tile; the next stripe's loads are issued before this stripe's matmuls.
b is loaded once for all stripes when it fits in 64 KiB per partition (any weight of a tiny GPT),
otherwise once per stripe. Edge tiles in M, N and K are smaller tiles (see common.py). The PSUM
result leaves through one instruction per engine: bias add on the Vector engine (PSUM -> SBUF), then
the activation on the Scalar engine; without a bias the activation reads PSUM directly.
"""
from __future__ import annotations

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import (broadcast_rows, double_buffered, load_row, num_tiles, row_tiles, tile_extent,
                                   transpose_to_sbuf)

RESIDENT_BYTES_PER_PARTITION = 64 * 1024     # keep all of b in SBUF up to this much (a third of Trn2's 192 KiB)

ACTIVATIONS = {
    None: None, "identity": None, "none": None,
    "relu": nl.relu, "gelu": nl.gelu, "gelu_tanh": nl.gelu_apprx_tanh,
    "tanh": nl.tanh, "sigmoid": nl.sigmoid, "silu": nl.silu,
}


def _activation_op(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {[k for k in ACTIVATIONS if k]}")
    return ACTIVATIONS[name]


def _check_contraction(kernel: str, left: str, k_left: int, right: str, k_right: int) -> None:
    if k_left != k_right:
        raise ValueError(f"{kernel}: contraction sizes differ: {left} has K={k_left}, {right} has K={k_right}")


def _load_stripe(a, m0: int, rows: int, a_is_kxm: bool):
    """DMA the K blocks of a that output rows m0:m0+rows need: [k, rows] blocks of a [K, M], or
    [rows, k] blocks of a [M, K] (transposed later, by _stationary_stripe)."""
    K = a.shape[0] if a_is_kxm else a.shape[1]
    blocks = []
    for k0, depth in row_tiles(K):
        if a_is_kxm:
            blocks.append(nl.load(a[k0:k0 + depth, m0:m0 + rows]))                  # [depth, rows]
        else:
            blocks.append(nl.load(a[m0:m0 + rows, k0:k0 + depth]))                  # [rows, depth]
    return blocks


def _stationary_stripe(blocks, a_is_kxm: bool):
    """The stationary tiles [k <= 128, rows] of one output row stripe (transposing a [M, K] operand)."""
    return blocks if a_is_kxm else [transpose_to_sbuf(block) for block in blocks]


def _moving_tile(b, k0: int, depth: int, n0: int, cols: int, b_is_nxk: bool):
    """The moving tile [depth, cols] of b for contraction rows k0:k0+depth and output columns n0:n0+cols."""
    if not b_is_nxk:
        return nl.load(b[k0:k0 + depth, n0:n0 + cols])
    # b holds [N, K]: transpose 128-column pieces into place
    tile = nl.ndarray((depth, cols), dtype=b.dtype, buffer=nl.sbuf)
    TP = nl.tile_size.pmax
    for c in nl.affine_range(num_tiles(cols, TP)):
        c0, width = tile_extent(c, TP, cols)
        block = nl.load(b[n0 + c0:n0 + c0 + width, k0:k0 + depth])                 # [width, depth]
        tile[:, c0:c0 + width] = nl.copy(nl.transpose(block), dtype=b.dtype)       # [depth, width]
    return tile


def tiled_matmul(result, a, b, *, a_is_kxm: bool = False, b_is_nxk: bool = False, bias=None,
                 activation=None, residual=None, tile_n: int | None = None, load_stripe=None, K: int | None = None) -> None:
    """result[M, N] = activation(op(a) @ op(b) + bias) + residual, issued tile by tile (call inside a kernel).

    a is [M, K] (or [K, M] with a_is_kxm), b is [K, N] (or [N, K] with b_is_nxk), bias is [N] or None,
    residual is [M, N] or None (added in fp32 after the activation, on the Vector engine, before the
    one rounding to result's dtype). tile_n: output tile width (<= 512, one PSUM bank of fp32; the
    compiler's tiling pass chooses it). load_stripe(m0, rows) -> the [rows, k] SBUF blocks of a
    stripe, to feed the matmul from tiles already on chip (a fused producer) instead of loading `a`.
    """
    M, N = result.shape
    if K is None:
        K = a.shape[0] if a_is_kxm else a.shape[1]
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    if tile_n is not None:
        if not 1 <= tile_n <= TN:
            raise ValueError(f"tiled_matmul: tile_n={tile_n}: an output tile is at most {TN} columns "
                             f"(one PSUM bank of fp32)")
        TN = tile_n
    act = _activation_op(activation)
    bias_tile = broadcast_rows(load_row(bias), TM) if bias is not None else None   # [128, N] fp32
    k_tiles, n_tiles = num_tiles(K, TK), num_tiles(N, TN)
    # all of b stays on chip when it fits (every M stripe reuses it); else it is reloaded per stripe
    b_bytes_per_partition = k_tiles * N * b.dtype.itemsize
    resident = None
    if num_tiles(M, TM) > 1 and b_bytes_per_partition <= RESIDENT_BYTES_PER_PARTITION:
        resident = [[_moving_tile(b, *tile_extent(k, TK, K), *tile_extent(n, TN, N), b_is_nxk)
                     for k in range(k_tiles)] for n in range(n_tiles)]
    loader = load_stripe or (lambda m0, rows: _load_stripe(a, m0, rows, a_is_kxm))
    stripes = double_buffered(row_tiles(M, TM), lambda tile: loader(*tile))
    for (m0, rows), blocks in stripes:                               # the next stripe loads meanwhile
        stripe = _stationary_stripe(blocks, a_is_kxm)                # hoisted: reused by every N tile
        for n in nl.affine_range(n_tiles):
            n0, cols = tile_extent(n, TN, N)
            res_tile = nl.load(residual[m0:m0 + rows, n0:n0 + cols]) if residual is not None else None
            acc = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                k0, depth = tile_extent(k, TK, K)
                moving = resident[n][k] if resident else _moving_tile(b, k0, depth, n0, cols, b_is_nxk)
                nisa.nc_matmul(dst=acc, stationary=stripe[k], moving=moving)      # accumulates over k
            out_tile = nl.ndarray((rows, cols), dtype=result.dtype, buffer=nl.sbuf)
            if res_tile is not None:
                _evacuate_with_residual(out_tile, acc, bias_tile, n0, rows, cols, act, res_tile)
            elif bias_tile is not None:
                biased = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=biased, data1=acc, data2=bias_tile[:rows, n0:n0 + cols], op=nl.add)
                if act is None:
                    nisa.tensor_copy(dst=out_tile, src=biased)
                else:
                    nisa.activation(dst=out_tile, op=act, data=biased)
            elif act is None:
                nisa.tensor_copy(dst=out_tile, src=acc)
            else:
                nisa.activation(dst=out_tile, op=act, data=acc)
            nl.store(result[m0:m0 + rows, n0:n0 + cols], value=out_tile)


def _evacuate_with_residual(out_tile, acc, bias_tile, n0: int, rows: int, cols: int, act, res_tile) -> None:
    """out = act(acc + bias) + residual: PSUM -> SBUF in fp32, the residual added last (Vector engine)."""
    value = acc
    if bias_tile is not None:
        biased = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=biased, data1=acc, data2=bias_tile[:rows, n0:n0 + cols], op=nl.add)
        value = biased
    if act is not None:
        activated = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=activated, op=act, data=value)
        value = activated
    nisa.tensor_tensor(dst=out_tile, data1=value, data2=res_tile, op=nl.add)


def column_sums(result, g) -> None:
    """result[N] = g[M, N] summed over its rows: ones[M, 1].T @ g, accumulated over row tiles in PSUM."""
    M, N = g.shape
    TP, TN = nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    for n in nl.affine_range(num_tiles(N, TN)):
        n0, cols = tile_extent(n, TN, N)
        total = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.psum)
        for m in nl.affine_range(num_tiles(M, TP)):
            m0, rows = tile_extent(m, TP, M)
            ones = nl.ones((rows, 1), dtype=g.dtype)
            nisa.nc_matmul(dst=total, stationary=ones, moving=nl.load(g[m0:m0 + rows, n0:n0 + cols]))
        out_row = nl.copy(total, dtype=result.dtype)
        nisa.dma_copy(dst=result[n0:n0 + cols], src=out_row)


# -- kernels ---------------------------------------------------------------------------------------
@nki.jit
def matmul(a, b):
    """a [M, K] @ b [K, N] -> [M, N] (any M, K, N; fp32 accumulation in PSUM, output in a's dtype)."""
    M, K = a.shape
    K_, N = b.shape
    _check_contraction("matmul", "a [M, K]", K, "b [K, N]", K_)
    result = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    tiled_matmul(result, a, b)
    return result


@nki.jit
def matmul_lhsT(lhsT, rhs):
    """lhsT [K, M], rhs [K, N] -> lhsT.T @ rhs [M, N]: the Tensor engine's own layout, no transposes."""
    K, M = lhsT.shape
    K_, N = rhs.shape
    _check_contraction("matmul_lhsT", "lhsT [K, M]", K, "rhs [K, N]", K_)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    tiled_matmul(result, lhsT, rhs, a_is_kxm=True)
    return result


def _weight_sizes(kernel: str, x, weight, weight_layout: str) -> tuple[int, int, int]:
    """(M, K, N) of x [M, K] and a weight stored [K, N] ("in_out") or [N, K] ("out_in", nn.Linear's)."""
    if weight_layout not in ("in_out", "out_in"):
        raise ValueError(f"{kernel}: weight_layout must be 'in_out' ([K, N]) or 'out_in' ([N, K], nn.Linear's), "
                         f"got {weight_layout!r}")
    M, K = x.shape
    K_, N = weight.shape if weight_layout == "in_out" else weight.shape[::-1]
    _check_contraction(kernel, "x [M, K]", K, f"weight ({weight_layout})", K_)
    return M, K, N


@nki.jit
def linear(x, weight, bias=None, activation=None, weight_layout="in_out", residual=None, tile_n=None):
    """activation(x [M, K] @ W + bias [N]) (+ residual [M, N]) -> [M, N], bias, activation and the
    residual add fused into the PSUM evacuation.

    weight: [K, N] (weight_layout="in_out", nn.Linear.weight.T, no transpose on chip) or [N, K]
    ("out_in", nn.Linear.weight as stored, e.g. the lm_head tied to the token table; its tiles are
    transposed on the Tensor engine at every call). activation: None, "relu", "gelu" (erf, nn.GELU's
    default), "gelu_tanh", "tanh", "sigmoid", "silu". residual: a transformer's `x + proj(y)` in the
    same kernel (the output takes the residual's dtype: the residual stream stays in its precision
    when the matmul runs in bf16). tile_n: output tile width (default 512)."""
    M, K, N = _weight_sizes("linear", x, weight, weight_layout)
    if residual is not None and tuple(residual.shape) != (M, N):
        raise ValueError(f"linear: residual must be [M, N] = {[M, N]}, got {list(residual.shape)}")
    dtype = residual.dtype if residual is not None else x.dtype
    result = nl.ndarray((M, N), dtype=dtype, buffer=nl.shared_hbm)
    tiled_matmul(result, x, weight, b_is_nxk=weight_layout == "out_in", bias=bias, activation=activation,
                 residual=residual, tile_n=tile_n)
    return result


@nki.jit
def matmul_backward(a, b, grad_out):
    """Gradients of a [M, K] @ b [K, N]: (grad_a = grad_out @ b.T, grad_b = a.T @ grad_out) — two matmuls."""
    M, K = a.shape
    _, N = b.shape
    grad_a = nl.ndarray((M, K), dtype=a.dtype, buffer=nl.shared_hbm)
    grad_b = nl.ndarray((K, N), dtype=b.dtype, buffer=nl.shared_hbm)
    tiled_matmul(grad_a, grad_out, b, b_is_nxk=True)      # contraction over N; b [K, N] read as [N, K].T
    tiled_matmul(grad_b, a, grad_out, a_is_kxm=True)      # contraction over M; a [M, K] is already lhsT
    return grad_a, grad_b


@nki.jit
def linear_backward(x, weight, grad_out, weight_layout="in_out"):
    """Gradients of x [M, K] @ W + bias: (grad_x [M, K], grad_weight in weight's layout, grad_bias [N]).

    grad_out is the gradient at the linear output (before any activation: chain gelu_backward first).
    For "out_in" weights [N, K] both matmuls need no operand transpose: grad_x = grad_out @ W and
    grad_W = grad_out.T @ x (grad_out [M, N] is already the stationary of a contraction over M)."""
    M, K, N = _weight_sizes("linear_backward", x, weight, weight_layout)
    grad_x = nl.ndarray((M, K), dtype=x.dtype, buffer=nl.shared_hbm)
    grad_weight = nl.ndarray(weight.shape, dtype=weight.dtype, buffer=nl.shared_hbm)
    grad_bias = nl.ndarray((N,), dtype=weight.dtype, buffer=nl.shared_hbm)
    if weight_layout == "in_out":
        tiled_matmul(grad_x, grad_out, weight, b_is_nxk=True)          # grad_out @ W.T, W [K, N] read as [N, K]
        tiled_matmul(grad_weight, x, grad_out, a_is_kxm=True)          # x.T @ grad_out
    else:
        tiled_matmul(grad_x, grad_out, weight)                         # grad_out [M, N] @ W [N, K]
        tiled_matmul(grad_weight, grad_out, x, a_is_kxm=True)          # grad_out.T @ x -> [N, K]
    column_sums(grad_bias, grad_out)
    return grad_x, grad_weight, grad_bias
