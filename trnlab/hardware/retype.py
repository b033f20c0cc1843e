"""An on-chip tile read as another type by an engine: ``tile.view(dtype)`` in a kernel (NKI 0.7's
NkiTensor.view; the NKI layer's `tensor_views.retype`) hands an instruction the View of the tile's own
elements and the type to read their bytes as (an instruction's ``src_dtype=`` / ``stationary_dtype=``...).

The bytes are the tile's: an engine reading a uint32 tile as float32 sees NumPy's ``words.view(np.float32)``,
and one writing it stores the bytes of the values it computes. A view is an access pattern any instruction
consumes ("Views are consumed by NKI ISA instructions (e.g., nisa.tensor_copy, nisa.dma_copy)", NkiTensor;
``view(dtype)`` is one of the view primitives built on ``.ap()``, NKI Access Patterns), so a retype to another
element size reads the bytes as that many elements of the new type: tensor_copy takes such an operand (its
shape, values, garbage and cost in the new type's elements: `typed_shape`, `values_as`, `stored_as`,
`typed_mask` / `own_mask`), quantize_mx reads fp16/bf16 out of wider elements (`mx.quantize_mx`); the other
engines read elements of the same size only here (their shapes, cost and garbage masks count the tile's own
elements). The view an instruction gets covers whole elements of the tile's own type (`tensor_views.bytes_view`):
for a narrower type, its last axis holds those elements; for a wider one, a last axis of the ratio's length
holds the own elements each new element spans.

tensor_copy, quantize_mx and nc_matmul_mx read their operands with `read_as` / `values_as` / `stored_as`;
tensor_tensor, tensor_scalar, activation, nc_matmul and nc_transpose turn an operand given with
``<operand>_dtype=`` into a `TypedView` (`typed`): the same tile, box and dependencies, whose ``values()`` are
its bytes read as the type and whose ``write()`` stores the bytes of values of that type — so the
instruction's rules, values and cost (`cost.operand` reads ``read_dtype``) see the type the kernel retyped the
tile to.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .errors import DtypeError, ShapeMismatchError
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


def read_as(v, dtype, what: str, any_size: bool = False) -> np.dtype:
    """The type `v`'s bytes are read as: its own (dtype None), or `dtype` of the same element size (of any
    size if `any_size`: an instruction that counts the new type's elements, `typed_shape`)."""
    if dtype is None:
        return v.tensor.dtype
    dtype = dtypes.as_dtype(dtype)
    if any_size and dtype.itemsize != v.tensor.itemsize:
        typed_shape(v, dtype)                      # covers whole elements of both types, or refused
        return dtype
    if dtype.itemsize != v.tensor.itemsize:
        raise DtypeError(f"data type: {what} is a {dtypes.name(v.tensor.dtype)} tile read as {dtypes.name(dtype)} "
                         f"(.view): this engine reads a retyped tile of the same element size only "
                         f"({v.tensor.itemsize} bytes, not {dtype.itemsize}); retype to a type of its size, or move "
                         f"the bytes with nisa.tensor_copy or a DMA", value=dtype.itemsize, limit=v.tensor.itemsize)
    return dtype


def typed_shape(v, dtype: np.dtype) -> tuple:
    """The shape of view `v` with its bytes read as `dtype`: its own for a type of the same size; the last
    axis times the size ratio for a narrower type; without its last axis, which must hold the ratio's
    number of own elements (one new element each), for a wider type."""
    old, new = v.tensor.itemsize, dtypes.as_dtype(dtype).itemsize
    if new == old:
        return tuple(v.shape)
    if new < old:
        return tuple(v.shape[:-1]) + (v.shape[-1] * (old // new),)
    if new % old or not v.shape or v.shape[-1] != new // old:
        raise DtypeError(f"data type: {dtypes.name(v.tensor.dtype)} view {tuple(v.shape)} read as "
                         f"{dtypes.name(dtype)}: one {new}-byte element spans {new // old} of its {old}-byte "
                         f"elements, the view's last axis", value=tuple(v.shape), limit=new // max(old, 1))
    return tuple(v.shape[:-1])


def same_tile(a, a_type, b, b_type, opcode: str, what: str) -> None:
    """Views `a` and `b`, read as `a_type` and `b_type`, hold the same partitions and as many elements
    per partition (`typed_shape`): the rule of an element-wise instruction, in the types read."""
    a_shape, b_shape = typed_shape(a, a_type), typed_shape(b, b_type)
    a_free, b_free = math.prod(a_shape) // max(a.partitions, 1), math.prod(b_shape) // max(b.partitions, 1)
    if a.partitions != b.partitions or a_free != b_free:
        raise ShapeMismatchError(
            f"shape mismatch: {opcode} {what}: {a_shape} {dtypes.name(a_type)} vs {b_shape} {dtypes.name(b_type)} "
            f"(partitions {a.partitions} vs {b.partitions}, elements per partition {a_free} vs {b_free}, in the "
            f"types read)", value=(a_shape, b_shape), limit="same tile")


def typed_mask(mask, v, dtype: np.dtype):
    """A mask of `v`'s own elements (garbage: `View.undefined`) as one of its elements read as `dtype`:
    a new element is garbage where any byte of it is."""
    old, new = v.tensor.itemsize, dtypes.as_dtype(dtype).itemsize
    if mask is None or new == old:
        return mask
    if new < old:
        return np.repeat(mask, old // new, axis=-1)
    return np.asarray(mask).any(axis=-1)


def own_mask(mask, v, dtype: np.dtype):
    """A mask of `v`'s elements read as `dtype` as one of its own elements: an own element is garbage where
    any byte of it is."""
    old, new = v.tensor.itemsize, dtypes.as_dtype(dtype).itemsize
    if mask is None or new == old:
        return mask
    mask = np.asarray(mask)
    if new < old:
        return mask.reshape(mask.shape[:-1] + (-1, old // new)).any(axis=-1)
    return np.repeat(mask[..., None], new // old, axis=-1)


def values_as(v, dtype: np.dtype) -> np.ndarray:
    """Full mode: the values of view `v` with its bytes read as `dtype` (of shape `typed_shape`)."""
    values = v.values()
    if dtype == v.tensor.dtype:
        return values
    return np.ascontiguousarray(values).view(dtype).reshape(typed_shape(v, dtype))


def stored_as(values: np.ndarray, v, dtype: np.dtype) -> np.ndarray:
    """Full mode: values computed in `dtype` (the type `v` is read as) as the bytes `v`'s elements hold."""
    values = np.asarray(values)
    if dtype == v.tensor.dtype:
        return values
    return np.ascontiguousarray(values.astype(dtype, copy=False)).view(v.tensor.dtype).reshape(v.shape)


def type_names(*pairs) -> tuple | None:
    """``read_as=`` for `NeuronCore._cost_ns`: per (view, type read as), the type's name if retyped."""
    names = tuple(None if t == v.tensor.dtype else dtypes.name(t) for v, t in pairs)
    return None if all(n is None for n in names) else names
