"""`nki.language`'s tile math: element-wise binary (Vector engine) and unary (Scalar engine) functions,
reductions along free axes, `matmul`, `transpose`, `broadcast_to` and `softmax`, each lowered to the
instructions of `nki.isa`. The namespace is `language.py`.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from trnlab.hardware import dtypes as _dt
from trnlab.hardware.errors import MemoryPlacementError, ShapeMismatchError
from trnlab.nki import isa as _isa
from trnlab.nki import issue as _issue
from trnlab.nki import launches as _launches
from trnlab.nki.errors import NKIError
from trnlab.nki.language_tiles import copy, float32, full, ndarray, sbuf, tile_size, zeros
from trnlab.nki.tensor import ON_CHIP, NkiTensor


# -- element-wise math ------------------------------------------------------------------------------
def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating))


def _per_partition(x: NkiTensor, other: NkiTensor) -> bool:
    """x is a [P, 1] (or [P]) tile that broadcasts along other's free axes."""
    return (x.shape[0] == other.shape[0] and math.prod(x.shape[1:]) == 1 and math.prod(other.shape[1:]) > 1)


_REVERSIBLE = {"subtract", "divide", "power"}


def _binary(op: str, x, y, dtype=None, mask=None):
    if _is_scalar(x) and _is_scalar(y):
        raise NKIError(f"nl.{op} needs at least one tile operand")
    if _is_scalar(y) or (isinstance(x, NkiTensor) and isinstance(y, NkiTensor) and _per_partition(y, x)):
        return _isa.tensor_scalar(x, op, y, dtype=dtype, mask=mask)
    if _is_scalar(x) or (isinstance(x, NkiTensor) and isinstance(y, NkiTensor) and _per_partition(x, y)):
        return _isa.tensor_scalar(y, op, x, reverse0=op in _REVERSIBLE, dtype=dtype, mask=mask)
    if not isinstance(x, NkiTensor) or not isinstance(y, NkiTensor):
        raise NKIError(f"nl.{op} operands must be tiles or numbers, got {type(x).__name__}, {type(y).__name__}")
    if tuple(x.shape) != tuple(y.shape) and not _same_up_to_unit_axes(x.shape, y.shape):
        shape = _free_broadcast_shape(x.shape, y.shape)
        if shape is None:
            raise ShapeMismatchError(
                f"shape mismatch in nl.{op}: {x.shape} vs {y.shape}; tiles must match, or broadcast along "
                "free axes of size 1 (same partitions); broadcast across partitions with .broadcast_to",
                value=(x.shape, y.shape), limit="same shape")
        x, y = _spread(x, shape), _spread(y, shape)
    return _isa.tensor_tensor(x, y, op, dtype=dtype, mask=mask)


def _same_up_to_unit_axes(a: tuple, b: tuple) -> bool:
    """(P, 1) and (P,), or (P, 1, F) and (P, F): the same elements per partition, as AWS's compiler
    reads them (a reduction without keepdims gives (P,), the tile it meets is (P, 1))."""
    squeeze = lambda shape: tuple(n for n in shape[1:] if n != 1)  # noqa: E731
    return bool(a) and bool(b) and a[0] == b[0] and squeeze(a) == squeeze(b)


def _free_broadcast_shape(a: tuple, b: tuple):
    """NumPy broadcasting of two tile shapes along free axes only (the partition sizes must match)."""
    if len(a) != len(b) or not a or a[0] != b[0]:
        return None
    out = [a[0]]
    for m, n in zip(a[1:], b[1:]):
        if m != n and 1 not in (m, n):
            return None
        out.append(builtins.max(m, n))
    return tuple(out)


def _spread(x: NkiTensor, shape: tuple) -> NkiTensor:
    """x read with stride 0 along its size-1 free axes, as an access pattern of `shape` (the operand
    stream repeats those elements; no copy)."""
    if tuple(x.shape) == tuple(shape):
        return x
    if x._index is not None or x._ap is not None:
        x = copy(x)                                   # an access pattern needs a whole tile
    storage = x._storage or x.shape
    if math.prod(storage) != math.prod(x.shape):
        raise ShapeMismatchError(f"shape mismatch: cannot broadcast {x.shape} to {shape}", value=x.shape, limit=shape)
    strides, step = [], 1
    for n in reversed(x.shape):
        strides.append(step)
        step *= n
    strides = strides[::-1]
    pattern = [[0 if (n == 1 and m != 1) else stride, m] for stride, n, m in zip(strides, x.shape, shape)]
    return x.ap(pattern)


def _make_binary(op: str):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        return _binary(op, x, y, dtype, mask)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise {op} of two tiles, or of a tile and a number / [P, 1] tile (Vector engine)."
    fn.nki_op = op
    return fn


add, subtract, multiply, divide = (_make_binary(n) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power = (_make_binary(n) for n in ("maximum", "minimum", "power"))
equal, not_equal, greater, greater_equal, less, less_equal = (
    _make_binary(n) for n in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal"))
logical_and, logical_or = _make_binary("logical_and"), _make_binary("logical_or")
bitwise_and, bitwise_or, bitwise_xor = (_make_binary(n) for n in ("bitwise_and", "bitwise_or", "bitwise_xor"))
mod = _make_binary("mod")


def _make_unary(op: str):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        return _isa.activation(op, x, dtype=dtype, mask=mask)
    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Element-wise {op} of a tile (Scalar engine activation)."
    fn.nki_op = op
    return fn


exp, log, tanh, sigmoid, relu = (_make_unary(n) for n in ("exp", "log", "tanh", "sigmoid", "relu"))
gelu, gelu_apprx_tanh, silu = (_make_unary(n) for n in ("gelu", "gelu_apprx_tanh", "silu"))
sqrt, rsqrt, square, abs, sign = (_make_unary(n) for n in ("sqrt", "rsqrt", "square", "abs", "sign"))
sin, cos, erf, softplus = (_make_unary(n) for n in ("sin", "cos", "erf", "softplus"))
identity = _make_unary("identity")


def bypass(*args, **kwargs):
    """nl.bypass: the ALU's "no operation", an op= of nisa.activate2's tensor-scalar stage only."""
    raise NKIError("nl.bypass is an ALU operator (op0=/op1= of nisa.activate2), not a function to call")


bypass.nki_op = "bypass"
copy.nki_op = "copy"


def negative(x, *, dtype=None, mask=None, **kwargs):
    """-x (Vector engine)."""
    return _isa.tensor_scalar(x, "multiply", -1.0, dtype=dtype, mask=mask)


def reciprocal(x, *, dtype=None, mask=None, **kwargs):
    """1 / x (Vector engine)."""
    return _isa.reciprocal(x, dtype=dtype, mask=mask)


negative.nki_op = "negative"
reciprocal.nki_op = "reciprocal"


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    """condition ? x : y element-wise, for a 0/1 condition tile (x or y may be a number; y may also be a
    [P, 1] tile): one Vector-engine select that copies values, so inf and NaN pass through exactly."""
    if not isinstance(condition, NkiTensor):
        raise NKIError("nl.where: condition must be a tile of 0/1 values (e.g. from nl.greater)")
    if not isinstance(x, NkiTensor):
        if not isinstance(y, NkiTensor):
            raise NKIError("nl.where: x and y are both numbers; at least one must be a tile")
        # select picks its tile where the predicate holds: swap the roles and reverse the predicate
        return _select(condition, y, x, True, mask, dtype or float32)
    return _select(condition, x, y, False, mask, dtype or x.dtype)


def _select(predicate: NkiTensor, on_true: NkiTensor, on_false, reverse: bool, mask, dtype) -> NkiTensor:
    """One Vector-engine select; on_false may be a number, a [P, 1] tile or a tile of on_true's shape."""
    ranges = _issue.ranges(mask, predicate, on_true, on_false)
    launch = _issue.begin()

    def emit(out, _accumulate):
        false = on_false.hw_view(ranges) if isinstance(on_false, NkiTensor) else float(on_false)
        launch.core.select(dst=out.hw_view(ranges), predicate=predicate.hw_view(ranges),
                           on_true=on_true.hw_view(ranges), on_false=false, reverse_pred=reverse)

    return _issue.produce(on_true.shape, dtype, "sbuf", emit, ranges=ranges)


# -- reductions along free axes ----------------------------------------------------------------
def _reduce(op: str, x, axis, dtype, mask, keepdims, negate=False):
    return _isa.tensor_reduce(op, x, axis, negate=negate, keepdims=keepdims, dtype=dtype, mask=mask)


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001  (NKI's name)
    """Sum along free axes (Vector engine)."""
    return _reduce("add", x, axis, dtype, mask, keepdims)


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    """Maximum along free axes (Vector engine)."""
    return _reduce("maximum", x, axis, dtype, mask, keepdims)


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    """Minimum along free axes (Vector engine)."""
    return _reduce("minimum", x, axis, dtype, mask, keepdims)


def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("multiply", x, axis, dtype, mask, keepdims)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    """Mean along free axes: a sum, then a multiply by 1/n (float32 for integer inputs)."""
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    count = math.prod(x.shape[a] for a in axes)
    total = _reduce("add", x, axes, float32 if not _dt.is_float(x.dtype) else dtype, mask, keepdims)
    return _isa.tensor_scalar(total, "multiply", 1.0 / count, dtype=dtype, mask=mask)


sum.nki_op, max.nki_op, min.nki_op, prod.nki_op = "add", "maximum", "minimum", "multiply"


# -- Tensor-engine operations -------------------------------------------------------------------------
def transpose(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x[P, F] -> [F, P] through the Tensor engine; the result is a PSUM tile."""
    return _isa.nc_transpose(_in_sbuf(x, mask), dtype=dtype, mask=mask)


def matmul(x, y, *, transpose_x: bool = False, mask=None, **kwargs) -> NkiTensor:
    """x @ y into a new PSUM tile (fp32); `psum_tile += nl.matmul(...)` accumulates.

    With transpose_x=True, x is given as [K, M] (already transposed, the layout the Tensor engine
    wants) and the result is x.T @ y; otherwise x is [M, K] and is first transposed on the Tensor
    engine (nc_transpose into PSUM, then a copy back to SBUF), as NKI does.
    """
    x, y = _in_sbuf(x, mask), _in_sbuf(y, mask)
    if not transpose_x:
        xt_psum = _isa.nc_transpose(x, mask=mask)
        x = _isa.tensor_copy(xt_psum, dtype=x.dtype)
    return _isa.nc_matmul(x, y, mask=mask)


def _in_sbuf(x: NkiTensor, mask=None) -> NkiTensor:
    """x, or a copy of it in SBUF when it is in PSUM (AWS's compiler inserts this copy)."""
    if isinstance(x, NkiTensor) and x.buffer == "psum":
        return _isa.tensor_copy(x, mask=mask)
    return x


def broadcast_to(x: NkiTensor, shape) -> NkiTensor:
    """Broadcast a [1, F] tile across partitions ([P, F], via a ones-vector matmul on the Tensor engine)
    or a [P, 1] tile along the free axis ([P, F], via the Vector engine)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    if isinstance(x, NkiTensor) and x.buffer not in ON_CHIP:
        # AWS's page: "src - the source of broadcast, a tile in SBUF or PSUM"
        raise MemoryPlacementError(f"operand memory: broadcast_to of {x.name!r}, which is in HBM; it spreads "
                                   f"a tile in SBUF or PSUM: nl.load the {x.shape} slice first, then "
                                   f"broadcast the tile to {shape}", value=x.buffer, limit="sbuf | psum")
    if len(shape) == 2 and x.shape[0] == 1 and x.shape[1] == shape[1]:
        ones_row = full((1, shape[0]), 1.0, x.dtype)                # [K=1, M=P]
        row = _in_sbuf(x)
        width = tile_size.gemm_moving_fmax                          # 512 columns per matmul
        if shape[1] <= width:
            spread = _isa.nc_matmul(ones_row, row)                  # [P, F] = ones.T @ x
            return _isa.tensor_copy(spread, dtype=x.dtype)
        out = ndarray(shape, x.dtype, buffer=sbuf, name="broadcast")
        for start in range(0, shape[1], width):                     # wider rows: one matmul per chunk
            stop = builtins.min(start + width, shape[1])
            out[:, start:stop] = _isa.tensor_copy(_isa.nc_matmul(ones_row, row[:, start:stop]), dtype=x.dtype)
        return out
    if len(shape) == 2 and x.shape[0] == shape[0] and math.prod(x.shape[1:]) == 1:
        out = zeros(shape, x.dtype)
        _isa.tensor_scalar(dst=out, data=out, op0="add", operand0=x)
        return out
    raise ShapeMismatchError(f"shape mismatch: cannot broadcast {x.shape} to {shape}", value=x.shape, limit=shape)


def shared_identity_matrix(n: int, dtype=float32, **kwargs) -> NkiTensor:
    """An [n, n] identity matrix in SBUF (written by one GpSimd iota instruction)."""
    eye = ndarray((n, n), dtype, buffer=sbuf, name="identity")
    launch = _issue.begin()
    launch.core.iota(dst=eye.hw_view(), expr=np.eye(n, dtype=np.int32))
    return eye


def device_print(prefix: str, x) -> None:
    """Print a tile's values when the program runs (full mode; in timing mode the shape only): an
    instruction of the program, like every other, so each replay prints again."""
    launch = _launches.current()
    launch.flush()
    if isinstance(x, NkiTensor):
        launch.core.device_print(prefix=prefix, src=x.hw_view())
    else:
        print(prefix, x)


def softmax(x, axis, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """exp(x - max) / sum along a free axis (numerically stable)."""
    peak = max(x, axis=axis, keepdims=True, mask=mask)
    shifted = subtract(x, peak, mask=mask)
    e = exp(shifted, mask=mask)
    total = sum(e, axis=axis, keepdims=True, mask=mask)
    return divide(e, total, mask=mask, dtype=dtype)
