"""`nki.language.dtypes` (and `nki.dtype`, as the NKI Library imports it): NKI's data types.

AWS's `nki.language` reference lists the types (bool_, int8 ... uint32, float16, float32, bfloat16,
tfloat32, float8_e4m3, float8_e4m3fn, float8_e5m2, the MX x4 packed types, float8_e8m0fnu); they are
the same objects as `nki.language`'s (`trnlab.nki.language_tiles`). Any other `nl.*` name is read
from `nki.language`, so a kernel annotating ``dtype: nki.dtype`` or calling ``nt.static_cast`` works.
"""
from __future__ import annotations

from trnlab.nki.language_tiles import (bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn,  # noqa: F401
                                       float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, float16,
                                       float32, int8, int16, int32, tfloat32, uint8, uint16, uint32)


def __getattr__(name: str):
    from trnlab.nki import language
    try:
        return getattr(language, name)
    except AttributeError:
        raise AttributeError(f"module 'nki.language.dtypes' has no attribute {name!r}") from None
