"""Data types of the simulated NeuronCore, as NumPy dtypes (low precision through `ml_dtypes`).

NKI's names: ``float32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2, int8, int32, ...``.
`cast` rounds exactly as ml_dtypes rounds (round-to-nearest-even, from float32).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DtypeError

float32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
# NKI has both: float8_e4m3 (IEEE-like, with infinities) and float8_e4m3fn (no inf, max 448)
# [nki.language.float8_e4m3, nki.language.float8_e4m3fn].
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int16 = np.dtype(np.int16)
uint16 = np.dtype(np.uint16)
int32 = np.dtype(np.int32)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)
# MX (OCP Microscaling) types of NeuronCore-v4 [nki.isa.quantize_mx, nki.isa.nc_matmul_mx]: the
# scale type E8M0, and 4-packed FP8 data — one 32-bit element holds four contiguous 8-bit values
# (element 0 in the lowest byte). Here a 32-bit structured type: values move as bits, math unpacks.
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
float8_e5m2_x4 = np.dtype([("float8_e5m2_x4", "<u4")])
float8_e4m3fn_x4 = np.dtype([("float8_e4m3fn_x4", "<u4")])
PACKED_X4 = {float8_e5m2_x4: float8_e5m2, float8_e4m3fn_x4: float8_e4m3fn}   # x4 type -> element type
# 4-packed FP4 (16 bits, four OCP E2M1 values, value q in bits 4q..4q+3): nc_matmul_mx's MXFP4 data
# (its values and layout: hardware/mx.py)
float4_e2m1fn_x4 = np.dtype([("float4_e2m1fn_x4", "<u2")])

SUPPORTED = {
    "float32": float32, "bfloat16": bfloat16, "float16": float16,
    "float8_e4m3": float8_e4m3, "float8_e4m3fn": float8_e4m3fn, "float8_e5m2": float8_e5m2,
    "int8": int8, "uint8": uint8, "int16": int16, "uint16": uint16,
    "int32": int32, "uint32": uint32, "bool": bool_,
    "float8_e8m0fnu": float8_e8m0fnu, "float8_e5m2_x4": float8_e5m2_x4, "float8_e4m3fn_x4": float8_e4m3fn_x4,
    "float4_e2m1fn_x4": float4_e2m1fn_x4,
}
_NAMES = {dt: name for name, dt in SUPPORTED.items()}
FLOAT8 = (float8_e4m3, float8_e4m3fn, float8_e5m2)
#: dtypes the Tensor engine accepts as matmul inputs [nki.isa.nc_matmul]
MATMUL_INPUTS = (float32, bfloat16, float16) + FLOAT8


def as_dtype(dtype) -> np.dtype:
    """Normalise a dtype given as a name, NumPy type or ml_dtypes type; refuse unsupported ones."""
    if isinstance(dtype, str):
        if dtype in SUPPORTED:
            return SUPPORTED[dtype]
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DtypeError(f"data type: {dtype!r} is not a dtype; supported: {', '.join(SUPPORTED)}",
                         value=dtype, limit=tuple(SUPPORTED)) from None
    if dt == np.float64:
        raise DtypeError("data type: float64 is not supported on a NeuronCore; use float32",
                         value=dt, limit=tuple(SUPPORTED))
    if dt not in _NAMES:
        raise DtypeError(f"data type: {dt} is not supported; supported: {', '.join(SUPPORTED)}",
                         value=dt, limit=tuple(SUPPORTED))
    return dt


def name(dtype) -> str:
    """NKI's name of a dtype (``bfloat16``, ``float8_e4m3``, ...)."""
    return _NAMES[np.dtype(dtype)]


def itemsize(dtype) -> int:
    """Bytes per element."""
    return np.dtype(dtype).itemsize


def is_float(dtype) -> bool:
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt in (bfloat16,) + FLOAT8


def cast(array, dtype) -> np.ndarray:
    """Round `array` to `dtype` exactly as ml_dtypes does (via float32 for float sources)."""
    dt = as_dtype(dtype)
    a = np.asarray(array)
    if a.dtype == dt:
        return a.copy()
    if dt in PACKED_X4 or a.dtype in PACKED_X4 or float4_e2m1fn_x4 in (dt, a.dtype):
        if a.dtype.itemsize != dt.itemsize:
            raise DtypeError(f"data type: {a.dtype} to {name(dt)} changes the element size; 4-packed MX "
                             f"data moves as its 32-bit words", value=a.dtype, limit=name(dt))
        return np.ascontiguousarray(a).view(dt).copy()      # the same bits (a word of 4 packed values)
    if a.dtype == np.float64 and dt != float32:
        a = a.astype(np.float32)    # hardware values are at most fp32: round once to fp32 first
    return a.astype(dt)


def poison(dtype):
    """The fill value of fresh on-chip memory: NaN for floats, the minimum for integers."""
    dt = np.dtype(dtype)
    if is_float(dt):
        return np.nan
    if dt == bool_:
        return True
    if dt in PACKED_X4:
        return np.array(0xFFFFFFFF, np.uint32).view(dt)      # four NaN bytes
    if dt == float4_e2m1fn_x4:
        return np.array(0xFFFF, np.uint16).view(dt)
    if dt == float8_e8m0fnu:
        return np.nan
    return np.iinfo(dt).min


def fp32_matmul_tolerance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The true tolerance of an fp32 ``a @ b`` (a [M, K], b [K, N]): elementwise, the largest
    difference between the fp32 result and the exact one, whatever the summation order.

    Full mode accumulates matmuls in fp32 through the machine's BLAS, whose kernels add the K
    products in an order of their own (it differs between CPU types — e.g. OpenBLAS's Haswell and
    SkylakeX kernels — although not with the thread count). Any order stays within Higham's
    bound ``|fl(a @ b) - a @ b| <= gamma_K * (|a| @ |b|)``, gamma_K = K u / (1 - K u), u = 2^-24
    (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 3.1), so two
    machines differ by at most twice this. Compare against an fp64 reference with this as atol.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    K = a.shape[-1]
    u = 2.0 ** -24
    gamma = K * u / (1 - K * u)
    return gamma * (np.abs(a) @ np.abs(b))
