"""More of NKI 0.7's `nki.language` (Neuron SDK 2.33): element-wise math (abs_max, abs_min, tan, arctan,
ceil, trunc), bitwise and logical operators (invert, left_shift, right_shift, logical_not, logical_xor), the
reductions `all` and `var`, `rms_norm`, `gather_flattened`, `expand_dims`, the buffer predicates
(is_hbm, is_sbuf, is_psum, is_on_chip), the operator constant `prelu` and the `with nl.no_reorder():`
block. Each lowers to the `nki.isa` instructions named in its docstring, whose costs are cost.py's rules
for those instructions; where AWS's page names no instruction, the lowering is trnlab's (ASSUMED).

Every name's page: https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.language.<name>.html
The namespace is `language.py`.
"""
from __future__ import annotations

import math

from trnlab.hardware import dtypes as _dt
from trnlab.hardware.select import need_generation as _need_generation
from trnlab.nki import isa as _isa
from trnlab.nki import issue as _issue
from trnlab.nki import launches as _launches
from trnlab.nki import language_math as _math
from trnlab.nki.errors import NKIError
from trnlab.nki.language_tiles import bool_, float32
from trnlab.nki.tensor import HBM_KINDS, ON_CHIP, NkiTensor


# -- element-wise binary operators whose operands do not commute --------------------------------------
def _ordered(op: str, x, y, dtype, mask):
    """x <op> y with the operand order kept when x is the number or the [P, 1] tile (reverse0)."""
    if _math._is_scalar(x) and isinstance(y, NkiTensor) or (
            isinstance(x, NkiTensor) and isinstance(y, NkiTensor) and _math._per_partition(x, y)):
        return _isa.tensor_scalar(y, op, x, reverse0=True, dtype=dtype, mask=mask)
    return _math._binary(op, x, y, dtype, mask)


def abs_max(x, y, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """The input of larger magnitude, with its sign; y on a tie (abs_max(-5, 3) = -5, abs_max(1, -1) = -1):
    one Vector-engine tensor_tensor / tensor_scalar. NeuronCore-v4 (trn3) and newer [nki.language.abs_max]."""
    _need_generation(_launches.current().core, "abs_max", "v4")
    return _ordered("abs_max", x, y, dtype, mask)


def abs_min(x, y, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """The input of smaller magnitude, with its sign; y on a tie (abs_min(5, -3) = -3, abs_min(1, -1) = -1):
    one Vector-engine instruction. NeuronCore-v4 (trn3) and newer [nki.language.abs_min]."""
    _need_generation(_launches.current().core, "abs_min", "v4")
    return _ordered("abs_min", x, y, dtype, mask)


def left_shift(x, y, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x << y on integer tiles (bit patterns): one Vector-engine bitvec instruction [nki.language.left_shift]."""
    return _ordered("left_shift", _integer(x, "left_shift"), _integer(y, "left_shift"), dtype, mask)


def right_shift(x, y, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x >> y on integer tiles (arithmetic for signed types, as NumPy's): one Vector-engine bitvec
    instruction [nki.language.right_shift]."""
    return _ordered("right_shift", _integer(x, "right_shift"), _integer(y, "right_shift"), dtype, mask)


def logical_xor(x, y, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """(x != 0) xor (y != 0) as 0/1: one Vector-engine instruction, like logical_and / logical_or
    [nki.language.logical_xor]."""
    return _math._binary("logical_xor", x, y, dtype, mask)


def _integer(x, name: str):
    if isinstance(x, NkiTensor) and _dt.is_float(x.dtype):
        raise NKIError(f"nl.{name}: a bitwise operator needs an integer tile, got {_dt.name(x.dtype)}")
    return x


# -- element-wise unary ---------------------------------------------------------------------------------
def tan(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """tan(x): one Scalar-engine activation, as sin / cos [nki.language.tan]."""
    return _isa.activation("tan", x, dtype=dtype, mask=mask)


def arctan(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """arctan(x): one Scalar-engine activation [nki.language.arctan]."""
    return _isa.activation("arctan", x, dtype=dtype, mask=mask)


def ceil(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """Smallest integer >= x: x + ((-x) mod 1), two Vector-engine instructions (a tensor_scalar, then a
    tensor_tensor; NumPy's floor-mod makes it exact for negative x too) [nki.language.ceil]."""
    up = _isa.tensor_scalar(x, "multiply", -1.0, op1="mod", operand1=1.0, dtype=float32, mask=mask)
    return _isa.tensor_tensor(x, up, "add", dtype=dtype or x.dtype, mask=mask)


def trunc(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x rounded toward zero: x - sign(x) * (|x| mod 1); three Vector-engine instructions and one Scalar
    sign, which overlaps them [nki.language.trunc]."""
    fraction = _isa.tensor_scalar(x, "abs", 0.0, op1="mod", operand1=1.0, dtype=float32, mask=mask)
    signed = _isa.tensor_tensor(fraction, _isa.activation("sign", x, dtype=float32, mask=mask), "multiply",
                                dtype=float32, mask=mask)
    return _isa.tensor_tensor(x, signed, "subtract", dtype=dtype or x.dtype, mask=mask)


def invert(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """~x on an integer tile: "Implemented as XOR with all-ones" [nki.language.invert], one Vector-engine
    bitvec tensor_scalar."""
    return _isa.tensor_scalar(_integer(_issue.tile(x, "x"), "invert"), "bitwise_xor", -1, dtype=dtype, mask=mask)


def logical_not(x, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """1 where x == 0, else 0: one Vector-engine tensor_scalar (equal 0) [nki.language.logical_not]."""
    return _isa.tensor_scalar(x, "equal", 0.0, dtype=dtype, mask=mask)


for _fn in (abs_max, abs_min, left_shift, right_shift, logical_xor, tan, arctan, ceil, trunc, invert,
            logical_not):
    _fn.nki_op = _fn.__name__


# -- prelu: an operator constant ------------------------------------------------------------------------
def prelu(*args, **kwargs):
    """nl.prelu: the parametric relu, an op= of nisa.activation / nisa.activate2 whose negative slope is
    relu_param [nki.language.prelu]; not a function to call."""
    raise NKIError("nl.prelu is an activation op (op=nl.prelu of nisa.activate2 with relu_param=slope), "
                   "not a function to call")


prelu.nki_op = "prelu"


# -- reductions -----------------------------------------------------------------------------------------
def all(x, axis, *, dtype=bool_, mask=None, keepdims=False, **kwargs) -> NkiTensor:  # noqa: A001 (NKI's name)
    """1 where every element along the free axes is non-zero: a Vector-engine tensor_scalar (not_equal 0),
    then a tensor_reduce (minimum) [nki.language.all]."""
    nonzero = _isa.tensor_scalar(x, "not_equal", 0.0, dtype=float32, mask=mask)
    return _isa.tensor_reduce("minimum", nonzero, axis, keepdims=keepdims, dtype=dtype, mask=mask)


def var(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs) -> NkiTensor:
    """Population variance along free axes (numpy.var, ddof=0), two passes in fp32: mean, x - mean on the
    Vector engine, its square on the Scalar engine, the mean of that [nki.language.var]."""
    centre = _math.mean(x, axis, dtype=float32, mask=mask, keepdims=True)
    deviation = _math.subtract(x, centre, dtype=float32, mask=mask)
    squares = _math.square(deviation, dtype=float32, mask=mask)
    return _math.mean(squares, axis, dtype=dtype or x.dtype, mask=mask, keepdims=keepdims)


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x / sqrt(sum(x^2 along axis) / n + epsilon) * w [nki.language.rms_norm]: a Scalar-engine square, a
    Vector sum, a tensor_scalar (* 1/n + epsilon), a Scalar rsqrt and one scalar_tensor_tensor
    (x * rstd * w). The reduction must leave one value per partition (axis: every free axis); w has x's
    shape. dtype and compute_dtype both set the result's dtype (the page: they "behave the same")."""
    x, w = _issue.tile(x, "x"), _issue.tile(w, "w")
    target = dtype or compute_dtype or x.dtype
    if tuple(w.shape) != tuple(x.shape):
        raise NKIError(f"nl.rms_norm: w {w.shape} must have x's shape {x.shape}")
    total = _math.sum(_math.square(x, dtype=float32, mask=mask), axis, dtype=float32, mask=mask, keepdims=True)
    if math.prod(total.shape[1:]) != 1:
        raise NKIError(f"nl.rms_norm: axis={axis} leaves {total.shape}; reduce every free axis of {x.shape} "
                       "(one rms per partition)")
    mean_square = _isa.tensor_scalar(total, "multiply", 1.0 / float(n), op1="add", operand1=float(epsilon),
                                     dtype=float32, mask=mask)
    rstd = _math.rsqrt(mean_square, dtype=float32, mask=mask)
    if len(rstd.shape) != 2:
        rstd = rstd.reshape((rstd.shape[0], 1))
    return _isa.scalar_tensor_tensor(data=x, op0="multiply", operand0=rstd, op1="multiply", operand1=w,
                                     dtype=target, mask=mask)


# -- data movement --------------------------------------------------------------------------------------
def gather_flattened(data, indices, axis=0, *, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """out[p, j...] = data[p, flat(indices[p, j...])] with data's free axes flattened, per partition: one
    GpSimd nisa.nc_n_gather (SBUF, uint32 indices); the result has indices' shape
    [nki.language.gather_flattened]; a dtype other than data's adds a tensor_copy."""
    gathered = _isa.nc_n_gather(data=_issue.tile(data, "data"), indices=_issue.tile(indices, "indices"))
    if dtype is not None and _dt.as_dtype(dtype) != gathered.dtype:
        return _isa.tensor_copy(gathered, dtype=dtype, mask=mask)
    return gathered


def expand_dims(data, axis) -> NkiTensor:
    """A view of `data` with new size-1 axes after its last one (the only place AWS supports them:
    "Currently only supports axis (or axes) after the last index") [nki.language.expand_dims]."""
    data = _issue.tile(data, "data")
    axes = sorted(int(a) for a in (axis if isinstance(axis, (list, tuple)) else (axis,)))
    ndim = len(data.shape) + len(axes)
    axes = sorted(a % ndim if a < 0 else a for a in axes)
    if axes != list(range(len(data.shape), ndim)):
        raise NKIError(f"nl.expand_dims: axis {axis} of a {len(data.shape)}-d tile; only new axes after the last "
                       f"index are supported ({list(range(len(data.shape), ndim))})")
    return data.reshape(tuple(data.shape) + (1,) * len(axes))


# -- buffer predicates ----------------------------------------------------------------------------------
def _buffer_name(buffer) -> str:
    """'sbuf', 'psum', 'hbm', ... of nl.sbuf / nl.psum / nl.hbm ... or of a tile."""
    name = getattr(buffer, "buffer", None) if isinstance(buffer, NkiTensor) else getattr(buffer, "name", buffer)
    if not isinstance(name, str):
        raise NKIError(f"expected a buffer (nl.sbuf, nl.psum, nl.hbm, ...) or a tile, got {type(buffer).__name__}")
    return name


def is_hbm(buffer) -> bool:
    """Whether `buffer` is device memory: nl.hbm, nl.shared_hbm or nl.private_hbm [nki.language.is_hbm]."""
    return _buffer_name(buffer) in HBM_KINDS


def is_sbuf(buffer) -> bool:
    """Whether `buffer` is nl.sbuf [nki.language.is_sbuf]."""
    return _buffer_name(buffer) == "sbuf"


def is_psum(buffer) -> bool:
    """Whether `buffer` is nl.psum [nki.language.is_psum]."""
    return _buffer_name(buffer) == "psum"


def is_on_chip(buffer) -> bool:
    """Whether `buffer` is on chip: SBUF or PSUM [nki.language.is_on_chip]."""
    return _buffer_name(buffer) in ON_CHIP


# -- with nl.no_reorder(): ------------------------------------------------------------------------------
class no_reorder:
    """``with nl.no_reorder():`` keeps the instructions traced in the block in program order
    [nki.language.no_reorder]. trnlab keeps the whole program's order, as for a loop with
    ``directives=ncc.no_reorder()`` (Program.no_reorder: the schedule is the traced order)."""

    def __enter__(self) -> "no_reorder":
        launch = _launches.active()
        if launch is not None:
            launch.no_reorder = True
        return self

    def __exit__(self, *exc) -> bool:
        return False
