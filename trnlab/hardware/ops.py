"""Operators the engines implement, by NKI name (``nl.add``, ``nl.exp``, ...), as NumPy functions.

Engines compute in float32 internally and round the result to the destination's dtype [ARCH-v2].
NumPy ufuncs are accepted as aliases (``np.add`` → ``"add"``). An unknown name raises
`UnknownOpError` listing the names that exist.
"""
from __future__ import annotations

import numpy as np

from .errors import UnknownOpError


def _erf(x):
    """erf: SciPy's if installed, else PyTorch's (both are exact to fp32; NumPy has none)."""
    try:
        from scipy import special
        return special.erf(x)
    except ImportError:
        import torch
        return torch.special.erf(torch.from_numpy(np.asarray(x, dtype=np.float64))).numpy()

# Binary element-wise operators (tensor_tensor, tensor_scalar)
BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "mod": np.mod,
    "equal": lambda a, b: np.equal(a, b).astype(np.float32),
    "not_equal": lambda a, b: np.not_equal(a, b).astype(np.float32),
    "greater": lambda a, b: np.greater(a, b).astype(np.float32),
    "greater_equal": lambda a, b: np.greater_equal(a, b).astype(np.float32),
    "less": lambda a, b: np.less(a, b).astype(np.float32),
    "less_equal": lambda a, b: np.less_equal(a, b).astype(np.float32),
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "logical_and": lambda a, b: np.logical_and(a, b).astype(np.float32),
    "logical_or": lambda a, b: np.logical_or(a, b).astype(np.float32),
    # one-operand ALU operators, usable as a binary op= (the operand is not used): nl.abs as AWS's NKI
    # Library passes it to tensor_scalar_reduce (op0=nl.abs, operand0=0.0) for an absolute max;
    # bypass passes the value through (activate2's "no operation") [NKI ISA, "Supported Math Operators"]
    "abs": lambda a, b: np.abs(a), "bypass": lambda a, b: a,
}
BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}

# Reductions along free axes (tensor_reduce)
REDUCE = {"add": np.sum, "multiply": np.prod, "maximum": np.max, "minimum": np.min,
          "max": np.max, "min": np.min}


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    e = np.exp(-np.abs(x))                      # stable for large |x|
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# Unary activation functions (activation on the Scalar engine)
ACTIVATION = {
    "copy": lambda x: x, "identity": lambda x: x,
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0), "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x), "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt,
    "square": np.square, "abs": np.abs, "sign": np.sign, "sin": np.sin, "cos": np.cos,
    "reciprocal": lambda x: 1.0 / x, "softplus": lambda x: np.logaddexp(0, x),
    "erf": _erf, "negative": np.negative,
}


def _gelu_dx(x):
    """d/dx of x * Phi(x): Phi(x) + x * phi(x) (Phi, phi: the standard normal CDF and density)."""
    return 0.5 * (1.0 + _erf(x / np.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)


def _silu_dx(x):
    """d/dx of x * sigmoid(x): s + x * s * (1 - s)."""
    s = _sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


# NKI 0.7's further activation functions (nki.language pages: gelu_apprx_sigmoid, gelu_apprx_sigmoid_dx,
# gelu_dx, silu_dx, erf_dx, mish). GELU's sigmoid approximation is x * sigmoid(1.702 x), the form AWS's NKI
# Library's PyTorch references use for it (ActFnType.Swish).
ACTIVATION.update({
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "gelu_apprx_sigmoid_dx": lambda x: _silu_dx(1.702 * x),    # d/dx x*s(ax) = s(ax) + ax*s(ax)(1-s(ax))
    "gelu_dx": _gelu_dx, "silu_dx": _silu_dx,
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
    "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
})

_UFUNC_ALIASES = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.maximum: "maximum", np.minimum: "minimum", np.power: "power", np.mod: "mod",
    np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater",
    np.greater_equal: "greater_equal", np.less: "less", np.less_equal: "less_equal",
    np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
    np.exp: "exp", np.log: "log", np.tanh: "tanh", np.sqrt: "sqrt", np.square: "square",
    np.abs: "abs", np.sign: "sign", np.sin: "sin", np.cos: "cos", np.negative: "negative",
    np.sum: "add", np.prod: "multiply", np.max: "maximum", np.min: "minimum",
    np.amax: "maximum", np.amin: "minimum",
}


def op_name(op) -> str:
    """The NKI name of an operator given as a name, a NumPy ufunc or an object with `.__name__`."""
    if isinstance(op, str):
        return op
    name = _UFUNC_ALIASES.get(op)
    if name is not None:
        return name
    return getattr(op, "__name__", repr(op))


def _lookup(table: dict, op, kind: str):
    name = op_name(op)
    fn = table.get(name)
    if fn is None:
        raise UnknownOpError(f"unknown op: {name!r} is not a {kind}; known: {', '.join(sorted(table))}",
                             value=name, limit=tuple(sorted(table)))
    return name, fn


def binary(op):
    """(name, fn) of a binary operator."""
    return _lookup(BINARY, op, "binary operator")


def reduce(op):
    return _lookup(REDUCE, op, "reduction")


def activation(op):
    return _lookup(ACTIVATION, op, "activation function")


# -- NKI 0.7's further operators (nki.language pages, Neuron SDK 2.33) ------------------------------------
# abs_max / abs_min: the input of larger / smaller magnitude with its sign, y on a tie (nki.language.abs_max:
# "x if |x| > |y|, else y"; abs_min: "x if |x| < |y|, else y"); logical_xor: a 0/1 result like logical_and.
BINARY.update({
    "abs_max": lambda a, b: np.where(np.abs(a) > np.abs(b), a, b),
    "abs_min": lambda a, b: np.where(np.abs(a) < np.abs(b), a, b),
    "logical_xor": lambda a, b: np.logical_xor(a, b).astype(np.float32),
})
# tan, arctan: Scalar-engine activation functions like sin / cos; prelu: the parametric relu whose negative
# slope is activate2's relu_param (nki.language.prelu: "The slope for negative inputs is controlled by the
# relu_param argument"); without a relu_param (nisa.activation) the slope is 0.
ACTIVATION.update({"tan": np.tan, "arctan": np.arctan, "prelu": lambda x: np.maximum(x, 0)})
_UFUNC_ALIASES.update({np.tan: "tan", np.arctan: "arctan", np.logical_xor: "logical_xor",
                       np.left_shift: "left_shift", np.right_shift: "right_shift"})
