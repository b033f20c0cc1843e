"""`nki.dtype`: NKI's data types as a module (``import nki.dtype as nt; nt.float8_e4m3``), and the
annotation kernels give a dtype argument (``dtype: nki.dtype = nl.bfloat16``). The types are
`nki.language`'s (the same NumPy dtypes)."""
from trnlab.nki.language_tiles import (  # noqa: F401
    bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn, float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4,
    float8_e8m0fnu, float16, float32, int8, int16, int32, tfloat32, uint8, uint16, uint32)
