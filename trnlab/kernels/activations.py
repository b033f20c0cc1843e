"""GELU forward and backward, element-wise on the Scalar and Vector engines.

Layout: x [R, C] (flatten leading axes first); 128 rows per tile on the partitions, C along the free
axis in pieces of at most 2048 elements. Two forms, as torch.nn.functional.gelu:

    approximate="none"   gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))        (nn.GELU's default,
                                                                                   used by trnlab.model.gpt)
    approximate="tanh"   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi)   (GPT-2's)

The forward is one Scalar-engine activation per tile (nl.gelu / nl.gelu_apprx_tanh). The backward
computes dx = dy * gelu'(x) from x:

    exact   gelu'(x) = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    tanh    gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2),  t = tanh(k (x + 0.044715 x^3))
"""
from __future__ import annotations

import math

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.kernels.common import double_buffered, row_tiles

FREE_TILE = 2048                       # elements per partition per instruction
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _tiles(R: int, C: int) -> list:
    """((r0, rows), (c0, cols)) of every [<=128, <=FREE_TILE] tile of an [R, C] tensor."""
    return [(rows, cols) for rows in row_tiles(R) for cols in row_tiles(C, FREE_TILE)]


def _check_approximate(approximate: str) -> None:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh' (as torch), got {approximate!r}")


def _gelu_derivative(x):
    """gelu'(x) of a tile, erf form (fp32)."""
    cdf = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=cdf, op=nl.erf, data=x, scale=1.0 / math.sqrt(2.0))         # erf(x / sqrt 2)
    nisa.tensor_scalar(dst=cdf, data=cdf, op0=nl.multiply, operand0=0.5, op1=nl.add, operand1=0.5)
    squares = nl.square(x, dtype=nl.float32)
    pdf = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=pdf, op=nl.exp, data=squares, scale=-0.5)                     # exp(-x^2 / 2)
    x_pdf = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=x_pdf, data=pdf, op0=nl.multiply, operand0=1.0 / math.sqrt(2.0 * math.pi),
                              op1=nl.multiply, operand1=x)
    return nl.add(cdf, x_pdf)


def _gelu_tanh_derivative(x):
    """gelu'(x) of a tile, tanh form (fp32)."""
    squares = nl.square(x, dtype=nl.float32)
    inner = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=inner, data=squares, op0=nl.multiply, operand0=CUBIC, op1=nl.add, operand1=1.0)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=t, op=nl.tanh, data=nl.multiply(x, inner, dtype=nl.float32), scale=SQRT_2_OVER_PI)
    sech2 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)                     # 1 - t^2
    nisa.tensor_scalar(dst=sech2, data=nl.square(t), op0=nl.multiply, operand0=-1.0, op1=nl.add, operand1=1.0)
    slope = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)                      # k (1 + 3c x^2)
    nisa.tensor_scalar(dst=slope, data=squares, op0=nl.multiply, operand0=3.0 * CUBIC * SQRT_2_OVER_PI,
                       op1=nl.add, operand1=SQRT_2_OVER_PI)
    term = nl.multiply(nl.multiply(x, sech2, dtype=nl.float32), slope)
    half_term = nl.multiply(term, 0.5)
    outer = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)                      # 0.5 (1 + t)
    nisa.tensor_scalar(dst=outer, data=t, op0=nl.multiply, operand0=0.5, op1=nl.add, operand1=0.5)
    return nl.add(outer, half_term)


@nki.jit
def gelu(x, approximate="none"):
    """gelu(x [R, C]) -> [R, C] in x's dtype (approximate: "none" = erf, "tanh")."""
    _check_approximate(approximate)
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    op = nl.gelu if approximate == "none" else nl.gelu_apprx_tanh

    def load(tile):
        (r0, rows), (c0, cols) = tile
        return nl.load(x[r0:r0 + rows, c0:c0 + cols])

    for ((r0, rows), (c0, cols)), x_tile in double_buffered(_tiles(R, C), load):
        y = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=op, data=x_tile)
        nl.store(out[r0:r0 + rows, c0:c0 + cols], value=y)
    return out


@nki.jit
def gelu_backward(x, grad_y, approximate="none"):
    """dx = dy * gelu'(x) for x, dy [R, C] -> [R, C] in dy's dtype."""
    _check_approximate(approximate)
    R, C = x.shape
    grad_x = nl.ndarray((R, C), dtype=grad_y.dtype, buffer=nl.shared_hbm)
    derivative = _gelu_derivative if approximate == "none" else _gelu_tanh_derivative

    def load(tile):
        (r0, rows), (c0, cols) = tile
        return nl.load(x[r0:r0 + rows, c0:c0 + cols]), nl.load(grad_y[r0:r0 + rows, c0:c0 + cols])

    for ((r0, rows), (c0, cols)), (x_tile, dy) in double_buffered(_tiles(R, C), load):
        dx = nl.multiply(dy, derivative(x_tile), dtype=grad_y.dtype)
        nl.store(grad_x[r0:r0 + rows, c0:c0 + cols], value=dx)
    return grad_x
