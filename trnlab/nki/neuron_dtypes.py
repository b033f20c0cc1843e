"""`neuron_dtypes`: the host-side dtype helpers AWS's NKI Library tests import (``import
neuron_dtypes as dt``; ``dt.static_cast(array, dtype)``, ``is_float_type``, ``sizeinbytes``,
``finfo``) to make NumPy inputs and references in NKI's low-precision types. It comes with AWS's
Neuron packages, not with the library; no page of AWS's documentation describes it, so the semantics
here are the ones the library's tests rely on (ASSUMED): casts round to nearest even as ml_dtypes
does, a float64 source is rounded to float32 first (the hardware holds at most fp32). The MX x4 types
(four values a word): a float array [..., 4F] casts to x4 [..., F] (each value rounded to the element
type, four consecutive values packed, value q in byte / nibble q), an x4 array [..., F] to a float type
gives its values [..., 4F] (the library's MX references quantize and dequantize so: test/utils/mx_utils.py
``quantize_mx_golden`` / ``nc_matmul_mx_golden``), and an integer array of the word's size keeps its bits
(the raw uint16 / uint32 words MX weights travel in).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from trnlab.hardware import dtypes as _dt
from trnlab.nki.language_dtypes import (bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn,  # noqa: F401
                                        float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, float16,
                                        float32, int8, int16, int32, tfloat32, uint8, uint16, uint32)


def static_cast(array, dtype) -> np.ndarray:
    """`array` as a NumPy array of `dtype` (a NumPy, ml_dtypes or nl dtype)."""
    target = np.dtype(dtype)
    source = np.asarray(array)
    if target.fields and not source.dtype.fields and _is_value_type(source.dtype):
        return _pack_x4(source, target)                    # values [..., 4F] -> words [..., F]
    if source.dtype.fields and not target.fields and _is_value_type(target):
        return _unpack_x4(source).astype(target)           # words [..., F] -> values [..., 4F]
    if target.fields or source.dtype.fields:               # MX x4 and raw words: the same bits
        return _dt.cast(source, target)
    if source.dtype == np.float64 and target not in (np.float64, np.float32):
        source = source.astype(np.float32)
    return source.astype(target)


def _is_value_type(dtype) -> bool:
    return is_float_type(dtype) and not np.dtype(dtype).fields


def _pack_x4(values: np.ndarray, x4) -> np.ndarray:
    from trnlab.hardware import mx
    if values.ndim == 0 or values.shape[-1] % 4:
        raise _dt.DtypeError(f"data type: {values.shape} to {_dt.name(x4)} packs four values a word; the last "
                             f"dimension must be a multiple of 4", value=values.shape, limit="multiple of 4")
    return mx.pack(np.asarray(values, np.float32).reshape(values.shape[:-1] + (-1, 4)), x4)


def _unpack_x4(words: np.ndarray) -> np.ndarray:
    from trnlab.hardware import mx
    values = mx.unpack(words, words.dtype)                 # [..., F, 4] float32
    return values.reshape(words.shape[:-1] + (4 * words.shape[-1],) if words.ndim else (4,))


def is_float_type(dtype) -> bool:
    """Whether `dtype` is a floating-point type (bfloat16 and the FP8 types included)."""
    dt = np.dtype(dtype)
    return dt.kind == "f" or _dt.is_float(dt) or dt in (np.dtype(ml_dtypes.float8_e8m0fnu),)


def sizeinbytes(dtype) -> int:
    """Bytes per element (a packed x4 element counts its whole word)."""
    return np.dtype(dtype).itemsize


def finfo(dtype):
    """Limits of a float type, bfloat16 and FP8 too (ml_dtypes.finfo)."""
    return ml_dtypes.finfo(np.dtype(dtype))
