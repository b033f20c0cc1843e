"""Kernels called with keyword arrays (as AWS's NKI Library harness calls every kernel:
``nki.cpu_simulate(kernel)[lnc](**inputs)``) get each array under its own name, whatever the
keywords' order, on one core and on an nl.nc launch."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl


@nki.jit
def add_a_slice(wide, narrow):
    out = nl.ndarray(narrow.shape, dtype=narrow.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(narrow), nl.load(wide[:, 0:64])))
    return out


@pytest.mark.parametrize("grid", [None, nl.nc(2)])
def test_keyword_arrays_out_of_name_order_reach_their_parameters(grid):
    narrow = np.ones((128, 64), np.float32)
    wide = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
    kernel = add_a_slice if grid is None else add_a_slice[grid]
    expected = narrow + wide[:, :64]
    np.testing.assert_array_equal(kernel(wide=wide, narrow=narrow), expected)   # name order
    np.testing.assert_array_equal(kernel(narrow=narrow, wide=wide), expected)   # the other order
