"""An on-chip tile read as another type by an engine: ``tile.view(dtype)`` in a kernel (NKI 0.7's
NkiTensor.view; the NKI layer's `tensor_views.retype`) hands an instruction the View of the tile's own
elements and the type to read their bytes as (an instruction's ``src_dtype=`` / ``stationary_dtype=``...).

The bytes are the tile's: an engine reading a uint32 tile as float32 sees NumPy's ``words.view(np.float32)``,
and one writing it stores the bytes of the values it computes. Engines other than the DMA read elements of the
same size only here (the instruction's shapes, cost and garbage masks count the tile's own elements);
quantize_mx reads fp16/bf16 out of wider elements (`mx.quantize_mx`).

tensor_copy, quantize_mx and nc_matmul_mx read their operands with `read_as` / `values_as` / `stored_as`;
tensor_tensor, tensor_scalar, activation, nc_matmul and nc_transpose turn an operand given with
``<operand>_dtype=`` into a `TypedView` (`typed`): the same tile, box and dependencies, whose ``values()`` are
its bytes read as the type and whose ``write()`` stores the bytes of values of that type — so the
instruction's rules, values and cost (`cost.operand` reads ``read_dtype``) see the type the kernel retyped the
tile to.
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import DtypeError
from .operands import _view
from .tensor import View


class TypedView(View):
    """A View whose elements' bytes are read and written as `read_dtype`, a type of the same size."""
    __slots__ = ("read_dtype",)

    def values(self) -> np.ndarray:
        return View.values(self).view(self.read_dtype)

    def fp32(self) -> np.ndarray:
        return np.asarray(self.values(), np.float32)

    def write(self, values: np.ndarray):
        """Store values of `read_dtype` (or any, cast to it) as the bytes of the tile's elements."""
        View.write(self, np.ascontiguousarray(np.asarray(values).astype(self.read_dtype, copy=False))
                   .view(self.tensor.dtype))


def typed(x, dtype, what: str):
    """Operand `x` (a Tensor or View) read as `dtype` (same element size, `read_as`): a `TypedView`; `x` itself
    for dtype None or its own type."""
    if dtype is None:
        return x
    v = _view(x, what)
    dtype = read_as(v, dtype, what)
    if dtype == v.tensor.dtype:
        return v
    out = TypedView.__new__(TypedView)
    for slot in View.__slots__:
        setattr(out, slot, getattr(v, slot))
    out.read_dtype = dtype
    return out


def typed_pair(stationary, stationary_dtype, moving, moving_dtype) -> tuple:
    """A matmul's (stationary, moving), each `typed` as its ``*_dtype`` says."""
    return (typed(stationary, stationary_dtype, "nc_matmul stationary"),
            typed(moving, moving_dtype, "nc_matmul moving"))


def dtype_of(v) -> np.dtype:
    """The type an instruction reads view `v` as: a `TypedView`'s, else its tensor's."""
    return v.read_dtype if type(v) is TypedView else v.tensor.dtype


def read_as(v, dtype, what: str) -> np.dtype:
    """The type `v`'s bytes are read as: its own (dtype None), or `dtype` of the same element size."""
    if dtype is None:
        return v.tensor.dtype
    dtype = dtypes.as_dtype(dtype)
    if dtype.itemsize != v.tensor.itemsize:
        raise DtypeError(f"data type: {what} is a {dtypes.name(v.tensor.dtype)} tile read as {dtypes.name(dtype)} "
                         f"(.view): this engine reads a retyped tile of the same element size only "
                         f"({v.tensor.itemsize} bytes, not {dtype.itemsize}); retype to a type of its size, or move "
                         f"the bytes with a DMA", value=dtype.itemsize, limit=v.tensor.itemsize)
    return dtype


def values_as(v, dtype: np.dtype) -> np.ndarray:
    """Full mode: the values of view `v` with its bytes read as `dtype` (same size: the same shape)."""
    values = v.values()
    return values if dtype == v.tensor.dtype else np.ascontiguousarray(values).view(dtype)


def stored_as(values: np.ndarray, v, dtype: np.dtype) -> np.ndarray:
    """Full mode: values computed in `dtype` (the type `v` is read as) as the bytes `v`'s elements hold."""
    values = np.asarray(values)
    if dtype == v.tensor.dtype:
        return values
    return np.ascontiguousarray(values.astype(dtype, copy=False)).view(v.tensor.dtype)


def type_names(*pairs) -> tuple | None:
    """``read_as=`` for `NeuronCore._cost_ns`: per (view, type read as), the type's name if retyped."""
    names = tuple(None if t == v.tensor.dtype else dtypes.name(t) for v, t in pairs)
    return None if all(n is None for n in names) else names
