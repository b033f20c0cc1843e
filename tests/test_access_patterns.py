"""NKI access patterns (AWS's "NKI Access Patterns" page): `.ap(pattern, offset, scalar_offset,
vector_offset, indirect_dim, dtype)` — indirect DMAs whose offsets are read from SBUF at run time —,
indexing a tile made by a pattern, and the 3-d / 4-d `dma_transpose` permutations."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import DtypeError, OutOfBoundsError, ShapeMismatchError
from trnlab.nki.errors import NKIError, ViewError

from nki_kernels import views as V

RNG = np.random.default_rng(7)


def test_scalar_offset_picks_the_block_named_at_run_time():
    table = RNG.normal(size=(5, 32, 16)).astype(np.float32)
    for e in (0, 3, 4):
        expert = np.array([[e]], np.int32)
        np.testing.assert_array_equal(nki.run(V.dynamic_expert, table, expert).outputs, table[e])
        np.testing.assert_array_equal(nki.run(V.selected_expert, table, expert).outputs, table[e])


def test_a_scalar_offset_past_the_tensor_is_an_out_of_bounds_error():
    table = np.zeros((5, 32, 16), np.float32)
    with pytest.raises(OutOfBoundsError, match="indirect DMA"):
        nki.run(V.dynamic_expert, table, np.array([[5]], np.int32))


def test_vector_offset_gathers_one_row_per_partition():
    table = RNG.normal(size=(100, 16)).astype(np.float32)
    ids = RNG.integers(0, 100, size=(64, 1)).astype(np.int32)
    np.testing.assert_array_equal(nki.run(V.gather_rows, table, ids).outputs, table[ids[:, 0]])


def test_vector_offset_on_the_destination_scatters_rows():
    table = RNG.normal(size=(100, 16)).astype(np.float32)
    ids = RNG.permutation(100)[:64].reshape(64, 1).astype(np.int32)
    values = RNG.normal(size=(64, 16)).astype(np.float32)
    expected = table.copy()
    expected[ids[:, 0]] = values
    np.testing.assert_array_equal(nki.run(V.scatter_rows, table, ids, values).outputs, expected)


def test_indirect_dmas_agree_with_the_fast_paths_off():
    table = RNG.normal(size=(100, 16)).astype(np.float32)
    ids = RNG.integers(0, 100, size=(64, 1)).astype(np.int32)
    with config.override(fast=False):
        reference = nki.run(V.gather_rows, table, ids)
    fast = nki.run(V.gather_rows, table, ids)
    np.testing.assert_array_equal(reference.outputs, fast.outputs)
    assert [r[:5] for r in reference.core.timeline.records] == [r[:5] for r in fast.core.timeline.records]


def test_an_indirect_dma_waits_for_the_offsets_it_reads():
    table = RNG.normal(size=(5, 32, 16)).astype(np.float32)
    run = nki.run(V.dynamic_expert, table, np.array([[1]], np.int32), timing_only=True)
    records = run.core.timeline.records
    load_index = next(r for r in records if r[1] == "dma_copy")
    indirect = next(r for r in records if r[1] == "dma_copy_indirect")
    assert indirect[2] >= load_index[3]


def test_indexing_a_tile_made_by_an_access_pattern():
    x = RNG.normal(size=(128, 64)).astype(np.float32)
    out = nki.run(V.pattern_then_index, x).outputs
    np.testing.assert_array_equal(out, x.reshape(128, 16, 4).transpose(0, 2, 1)[0:64, 1:3])


def test_pattern_pairs_may_be_given_one_per_argument():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile.ap([32, 16], [1, 8], offset=8))
        return out

    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x[:, 8:16])


def test_ap_of_an_already_indexed_tensor_is_refused():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.sbuf)
        tile.ap(pattern=[[256, 128], [1, 128]], offset=0).ap(pattern=[[128, 64], [1, 64]], offset=0)
        return x

    with pytest.raises(ViewError, match="already indexed"):
        nki.run(kernel, np.zeros((128, 256), np.float32))


def test_ap_of_a_reshaped_tile_counts_from_the_tiles_own_elements():
    # AWS's TensorView(sbuf.reshape(...)).get_view() calls .ap() on a reshaped SBUF tensor
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        regrouped = tile.reshape((128, 8, 8))
        view = regrouped.ap(pattern=[[64, 128], [1, 8], [8, 8]], offset=0)      # [128, 8, 8] transposed
        out = nl.ndarray((128, 8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        res = nl.ndarray((128, 8, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=view)
        nisa.dma_copy(dst=out, src=res)
        return out

    x = RNG.normal(size=(128, 64)).astype(np.float32)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x.reshape(128, 8, 8).transpose(0, 2, 1))


def test_an_indirect_view_is_moved_by_dma_only():
    @nki.jit
    def kernel(table, ids):
        idx = nl.ndarray((64, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids)
        tile = nl.ndarray((100, 16), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table)
        out = nl.ndarray((64, 16), dtype=table.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=tile.ap([[16, 64], [1, 16]], vector_offset=idx, indirect_dim=0))
        return table

    with pytest.raises(ViewError, match="only DMAs move it"):
        nki.run(kernel, np.zeros((100, 16), np.float32), np.zeros((64, 1), np.int32))


@pytest.mark.parametrize("shape, axes", [((16, 4, 128), (2, 1, 0)), ((16, 2, 3, 128), (3, 1, 2, 0))])
def test_dma_transpose_of_3d_and_4d_sources(shape, axes):
    x = RNG.normal(size=shape).astype(np.float32)
    np.testing.assert_array_equal(nki.run(V.transpose_dma, x).outputs, x.transpose(axes))


def test_dma_transpose_refuses_permutations_aws_does_not_list():
    @nki.jit
    def kernel(x):
        tile = nl.ndarray((4, 16, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=tile, src=x, axes=(1, 0, 2))
        return x

    with pytest.raises(ShapeMismatchError, match=r"\(3, 1, 2, 0\) for 4-d"):
        nki.run(kernel, np.zeros((16, 4, 8), np.float32))


@nki.jit
def gather_rows_or_skip(table, ids):
    """gather_rows with oob_mode.skip: rows whose offset is past the table keep the zeros set first."""
    N, C = table.shape
    P = ids.shape[0]
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((P, C), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=rows, value=0.0)
    nisa.dma_copy(dst=rows, src=table.ap([[C, P], [1, C]], vector_offset=idx, indirect_dim=0),
                  oob_mode=nisa.oob_mode.skip)
    out = nl.ndarray((P, C), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_oob_mode_skip_leaves_the_rows_past_the_tensor_unmoved():
    table = RNG.normal(size=(10, 8)).astype(np.float32)
    ids = np.array([[3], [12], [0], [10]], np.int32)
    expected = np.zeros((4, 8), np.float32)
    expected[0], expected[2] = table[3], table[0]
    np.testing.assert_array_equal(nki.run(gather_rows_or_skip, table, ids).outputs, expected)
    with pytest.raises(OutOfBoundsError):
        nki.run(V.gather_rows, table, ids)


def test_an_integer_scalar_offset_is_folded_at_trace_time_and_other_offsets_are_refused():
    seen = {}

    @nki.jit
    def kernel(table, use_scalar):
        if use_scalar:
            table.ap([[16, 4], [1, 16]], scalar_offset=object(), indirect_dim=0)
        view = table.ap([[16, 4], [1, 16]], offset=0, scalar_offset=2, indirect_dim=0)
        seen["offset"] = view.offset
        out = nl.ndarray((4, 16), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out

    table = np.arange(10 * 16, dtype=np.float32).reshape(10, 16)
    np.testing.assert_array_equal(nki.run(kernel, table, False).outputs, table[2:6])
    assert seen["offset"] == 32
    with pytest.raises(ViewError, match="SBUF tile of integers"):
        nki.run(kernel, table, True)


def test_indirect_views_on_both_ends_of_a_dma_are_refused():
    @nki.jit
    def kernel(table, ids):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids)
        out = nl.ndarray((10, 8), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0),
                      src=table.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0))
        return out

    with pytest.raises(NKIError, match="both src and dst"):
        nki.run(kernel, np.zeros((10, 8), np.float32), np.zeros((4, 1), np.int32))


@pytest.mark.parametrize("columns", [1, 2])
def test_an_indirect_dma_transpose_gathers_rows_then_transposes(columns):
    import ml_dtypes
    table = RNG.normal(size=(300, 64)).astype(ml_dtypes.bfloat16)
    ids = RNG.integers(0, 300, size=(128, columns)).astype(np.int32)
    rows = ids.T.reshape(-1)                       # "flat_indices = indices.T.flatten()"
    np.testing.assert_array_equal(nki.run(V.gather_transpose, table, ids).outputs, table[rows].T)


def test_an_indirect_dma_between_dtypes_is_refused_on_neuroncore_v2_only():
    # (casting on NeuronCore-v3/-v4: tests/nki_api/test_indirect_dma_cast.py)
    @nki.jit
    def kernel(table, ids):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids)
        rows = nl.ndarray((4, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0))
        return table

    nki.run(kernel, np.zeros((10, 8), np.float32), np.zeros((4, 1), np.int32))
    with pytest.raises(DtypeError, match="does not convert on NeuronCore-v2"):
        nki.run(kernel, np.zeros((10, 8), np.float32), np.zeros((4, 1), np.int32), target="trn1")


@nki.jit
def _rows_by_pattern(k, COLS: int = 512):
    # rows 0..P-1 of the last two axes of k ([1, P, S] or [P, S]), COLS columns, by an access pattern
    P, S = k.shape[-2:]
    tile = nl.ndarray((P, COLS), dtype=k.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=k.ap(pattern=[[S, P], [1, COLS]], offset=S - COLS))
    out = nl.ndarray((P, COLS), dtype=k.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def test_a_pattern_over_a_tensor_of_more_axes_moves_whole_rows():
    # AWS's attention_cte reads k [1, d, S] with the 2-d pattern [[S, d], [1, n]]: each of its d rows is
    # n contiguous elements, one descriptor each, as the same pattern over k [d, S] (it used to be
    # costed element by element: a 64-byte burst per 2-byte element, 5x slower)
    k = RNG.normal(size=(1, 128, 2048)).astype(np.float32)
    three = nki.run(_rows_by_pattern, k, target="trn2")
    two = nki.run(_rows_by_pattern, k[0], target="trn2")
    np.testing.assert_array_equal(three.outputs, k[0, :, -512:])
    assert three.latency_us == pytest.approx(two.latency_us)
