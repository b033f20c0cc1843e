"""An SPMD launch grid counts programs along each axis (nki.language.num_programs): an axis of none
launches nothing, which trnlab refuses by name instead of returning no output."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.nki.errors import LaunchGridError


@nki.jit
def copy_rows(a_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(a_tensor[i * 128:(i + 1) * 128, :]))
    return out


@pytest.mark.parametrize("grid", [0, (2, 0), -1])
def test_a_grid_axis_of_no_programs_is_refused(grid):
    with pytest.raises(LaunchGridError, match="at least 1"):
        copy_rows[grid](np.ones((256, 8), np.float32))


def test_a_grid_axis_that_is_not_a_count_is_refused():
    with pytest.raises(LaunchGridError, match="number of programs"):
        copy_rows[1.5]


def test_a_grid_of_two_programs_still_runs_both():
    a = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    np.testing.assert_array_equal(copy_rows[2](a), a)
