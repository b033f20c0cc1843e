"""Kernel arguments in a dtype the chip does not have are refused by name at the kernel boundary
(trnlab/nki/argument_dtypes.py, issue 24): float64 used to be computed in float32 without a word."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware.errors import DtypeError
from trnlab.nki.argument_dtypes import CHIP_DTYPES, ArgumentDtypeError


@nki.jit
def copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out


@pytest.mark.parametrize("value, dtype, nearest", [
    (np.ones((4, 8), np.float64), "float64", "float32"),
    (np.arange(32).reshape(4, 8).astype(np.int64), "int64", "int32"),
    (torch.ones(4, 8, dtype=torch.float64), "float64", "float32"),
    (torch.ones(4, 8, dtype=torch.int64), "int64", "int32"),
    (np.ones((4, 8), np.complex64), "complex64", None),
    (nki.ShapeDtype((4, 8), "float64"), "float64", "float32"),
], ids=["numpy float64", "numpy int64", "torch float64", "torch int64", "complex64", "ShapeDtype float64"])
def test_an_argument_the_chip_cannot_hold_is_refused_by_name(value, dtype, nearest):
    timing = isinstance(value, nki.ShapeDtype)
    with pytest.raises(ArgumentDtypeError) as caught:
        nki.run(copy, value, timing_only=timing)
    message = str(caught.value)
    assert f"'x' is {dtype}" in message and ", ".join(CHIP_DTYPES) in message
    if nearest:
        assert f"x.astype(np.{nearest})" in message
    assert isinstance(caught.value, DtypeError)  # still a data-type rule for `except DtypeError`


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8])
def test_the_chips_dtypes_pass_unchanged(dtype):
    x = (np.arange(32) % 7).reshape(4, 8).astype(dtype)
    out = nki.run(copy, x).outputs
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, x)
