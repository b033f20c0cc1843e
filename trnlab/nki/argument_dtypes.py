"""A kernel argument in a dtype the chip does not have is refused by name, never converted silently.

AWS's table of the dtypes NKI supports ("Supported Data Types",
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/nki.api.shared.html) has integers of
8, 16 and 32 bits, the float8 types, bfloat16, float16, tfloat32, float32 and bool: no 64-bit type.
NumPy makes
float64 and int64 by default (``np.random.rand``, ``np.arange``), so an argument of either used to be
computed in float32 (and int64 refused with a bare list); now both stop at the kernel boundary with
`ArgumentDtypeError`, which names the argument, its dtype, the chip's dtypes and the conversion to
write. No AWS-documented conversion is applied for the user: which dtype a float64 array should
become (float32? bfloat16?) is the kernel author's choice, as it is on the chip.
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware import dtypes as hw_dtypes
from trnlab.hardware.errors import DtypeError

# The dtypes a kernel argument may have: the chip's (the MX packed types of NeuronCore-v4 are in
# hardware.dtypes.SUPPORTED too, and are accepted).
CHIP_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
               "int8", "uint8", "int16", "uint16", "int32", "uint32", "bool")
# The nearest dtype the chip has, for the message.
NEAREST = {"float64": "float32", "int64": "int32", "uint64": "uint32", "complex64": None, "complex128": None}


class ArgumentDtypeError(DtypeError):
    """A kernel argument whose dtype the NeuronCore does not have (float64, int64, complex, ...)."""
    rule = "kernel argument data type"


def _name(dtype) -> str:
    try:
        return str(np.dtype(dtype))
    except TypeError:
        return str(dtype)


def refuse_dtype_the_chip_lacks(dtype, argument: str) -> None:
    """Raise ArgumentDtypeError unless `dtype` is one the chip has (see the module docstring)."""
    try:
        hw_dtypes.as_dtype(dtype)
        return
    except DtypeError:
        pass
    name = _name(dtype)
    nearest = NEAREST.get(name)
    advice = (f"; convert it first, e.g. {argument}.astype(np.{nearest}) (or .to(torch.{nearest}))"
              if nearest else "")
    raise ArgumentDtypeError(
        f"kernel argument data type: {argument!r} is {name}, which a NeuronCore does not have; it has "
        f"{', '.join(CHIP_DTYPES)}{advice}", value=name, limit=CHIP_DTYPES)
