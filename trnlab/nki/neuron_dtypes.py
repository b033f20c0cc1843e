"""`neuron_dtypes`: the host-side dtype helpers AWS's NKI Library tests import (``import
neuron_dtypes as dt``; ``dt.static_cast(array, dtype)``, ``is_float_type``, ``sizeinbytes``,
``finfo``) to make NumPy inputs and references in NKI's low-precision types. AWS ships it with its
compiler and publishes no page for it; the semantics here are the ones the library's tests rely on
(ASSUMED): casts round to nearest even as ml_dtypes does, a float64 source is rounded to float32
first (the hardware holds at most fp32), and the MX x4 types keep their packed bits.
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
    if target.fields or source.dtype.fields:               # MX x4: the same words, reinterpreted
        return _dt.cast(source, target)
    if source.dtype == np.float64 and target not in (np.float64, np.float32):
        source = source.astype(np.float32)
    return source.astype(target)


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
