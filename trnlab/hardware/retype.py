"""An on-chip tile read as another type by an engine: ``tile.view(dtype)`` in a kernel (NKI 0.7's
NkiTensor.view; the NKI layer's `tensor_views.retype`) hands an instruction the View of the tile's own
elements and the type to read their bytes as (an instruction's ``src_dtype=`` / ``stationary_dtype=``...).

The bytes are the tile's: an engine reading a uint32 tile as float32 sees NumPy's ``words.view(np.float32)``,
and one writing it stores the bytes of the values it computes. Engines other than the DMA read elements of the
same size only here (the instruction's shapes, cost and garbage masks count the tile's own elements);
quantize_mx reads fp16/bf16 out of wider elements (`mx.quantize_mx`).
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import DtypeError


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
