"""Indices built from several `nl.mgrid` grids, or from `nl.arange` and a grid, in one access.

NKI's `nl.mgrid` is NumPy's ("Same as NumPy mgrid", nki.language.mgrid page): every output is a
dense array of the grid's shape, so `.p` of two grids of one shape is the same array, and an
`nl.arange(128)[:, None]` column broadcasts against a grid's `[128, F]` output."""
import numpy as np

import trnlab.nki as nki
import trnlab.nki.language as nl


@nki.jit
def copy_through_two_grids(a_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    g1 = nl.mgrid[0:128, 0:256]
    g2 = nl.mgrid[0:128, 0:256]
    tile = nl.load(a_tensor[g1.p, g2.x])          # [128, 256]
    nl.store(out[g2.p, g1.x], value=tile)
    return out


@nki.jit
def masked_rows_through_two_grids(a_tensor):
    rows = a_tensor.shape[0]
    out = nl.ndarray((rows, 64), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    g1 = nl.mgrid[0:128, 0:64]
    g2 = nl.mgrid[0:128, 0:64]
    tile = nl.load(a_tensor[g1.p, g2.x], mask=(g2.p < rows))   # the mask names the other grid's .p
    nl.store(out[g1.p, g1.x], value=nl.multiply(tile, 2.0), mask=(g1.p < rows))
    return out


@nki.jit
def arange_column_with_a_grid_row(a_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    grid = nl.mgrid[0:128, 0:64]
    nl.store(out[i_p, grid.x], value=nl.load(a_tensor[i_p, grid.x]))
    return out


@nki.jit
def two_arange_columns(a_tensor):
    out = nl.ndarray((128, 1), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i_p, j_p = nl.arange(128)[:, None], nl.arange(128)[:, None]
    nl.store(out, value=nl.load(a_tensor[i_p, j_p]))
    return out


def test_two_grids_of_one_shape_index_one_tile():
    a = np.random.default_rng(0).normal(size=(128, 256)).astype(np.float32)
    np.testing.assert_array_equal(copy_through_two_grids(a), a)


def test_a_mask_on_one_grid_bounds_the_same_axis_of_another():
    a = np.random.default_rng(1).normal(size=(100, 64)).astype(np.float32)
    np.testing.assert_array_equal(masked_rows_through_two_grids(a), 2 * a)


def test_an_arange_column_broadcasts_against_a_grid_row():
    a = np.random.default_rng(2).normal(size=(128, 64)).astype(np.float32)
    np.testing.assert_array_equal(arange_column_with_a_grid_row(a), a)


def test_two_arange_columns_are_one_array_as_in_numpy():
    # each nl.arange(128)[:, None] is the same (128, 1) array: a[i_p, j_p] reads a's diagonal
    a = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
    np.testing.assert_array_equal(two_arange_columns(a)[:, 0], np.diag(a))


@nki.jit
def masked_with_fresh_aranges(a_tensor):
    # neuronx-cc's dumped kernels (NKIBench's, among others) write every index and mask with fresh
    # nl.arange calls: the mask still bounds the access's rows
    rows = a_tensor.shape[0]
    out = nl.ndarray((rows, 64), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((rows + 127) // 128):
        tile = nl.load(a_tensor[128 * i + nl.arange(128)[:, None], nl.arange(64)[None, :]],
                       mask=-128 * i + -1 * nl.arange(128)[:, None] + rows - 1 >= 0)
        nl.store(out[128 * i + nl.arange(128)[:, None], nl.arange(64)[None, :]], value=nl.multiply(tile, 3.0),
                 mask=(128 * i + nl.arange(128)[:, None] < rows))
    return out


def test_a_mask_written_with_its_own_arange_bounds_the_access():
    a = np.random.default_rng(3).normal(size=(200, 64)).astype(np.float32)
    np.testing.assert_array_equal(masked_with_fresh_aranges(a), 3 * a)
