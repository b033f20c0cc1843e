"""A kernel's outputs as benchmarks/nki_library_plugin.py hands them to AWS's NKI Library harness.

The harness keeps each output in the dtype of its placeholder (``LazyGoldenGenerator.output_ndarray``):
its simulation path converts by value (``np.asarray(output, dtype=placeholder.dtype)``), its chip path
reads the output file's bytes as that type (``np.fromfile``). The two agree except for the MX x4 types:
AWS's have no cast by value to another type (the harness's ``OutputValidator`` catches the TypeError
``astype(np.float32)`` raises for them and unpacks the words instead), so a test that declares an x4
output as another type of the same size compares bytes, as on the chip: the library's mxfp_load declares
its float8_e4m3fn_x4 output float32 and views its reference's words as float32. trnlab's x4 types are
one-field structured types (`trnlab.hardware.dtypes`), which NumPy would cast by the word's integer value.
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware import dtypes

X4 = (*dtypes.PACKED_X4, dtypes.float4_e2m1fn_x4)


def as_placeholder(output, placeholder) -> np.ndarray:
    """`output` in `placeholder`'s dtype: an x4 output as its bytes (same element size, or TypeError),
    any other by value, as the harness's simulation path converts it."""
    output, target = np.asarray(output), np.dtype(placeholder.dtype)
    if output.dtype in X4 and target != output.dtype:
        if target.itemsize != output.dtype.itemsize:
            raise TypeError(f"an {dtypes.name(output.dtype)} output goes to the harness as its bytes: its "
                            f"placeholder's type {target} has {target.itemsize}-byte elements, the output "
                            f"{output.dtype.itemsize}-byte ones")
        return output.view(target)
    return np.asarray(output, dtype=target)
