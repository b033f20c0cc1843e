"""NKI 0.7 `NkiTensor` views (nki.language.NkiTensor; argument forms of AWS's NKI Library TensorView):
the same bytes read through another access pattern — values equal to NumPy's view, no copy, and
views that are no access pattern or that would move an on-chip tensor's partition dim refused."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.nki.errors import NKIError, ViewError

from nki_kernels import views as V


def test_a_permuted_hbm_view_moves_in_one_dma():
    x = np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16)
    run = nki.run(V.permuted_load, x)
    np.testing.assert_array_equal(run.outputs, x.transpose(1, 0, 2))
    assert sum(r[1] == "dma_copy" for r in run.core.timeline.records) == 2     # no copy for the view


def test_on_chip_views_read_the_tile_as_numpy_views_do():
    x = np.random.default_rng(0).normal(size=(128, 64)).astype(np.float32)
    odd, turned, column, swapped = nki.run(V.on_chip_views, x).outputs
    np.testing.assert_array_equal(odd, x[:, 1::2])
    np.testing.assert_array_equal(turned, x.reshape(128, 16, 4).transpose(0, 2, 1))
    np.testing.assert_array_equal(column, np.repeat(x[:, 5:6], 8, axis=1))
    np.testing.assert_array_equal(swapped, x.reshape(128, 8, 8).transpose(0, 2, 1))


def test_views_give_the_same_values_and_times_with_the_fast_paths_off():
    x = np.random.default_rng(1).normal(size=(128, 64)).astype(np.float32)
    with config.override(fast=False):
        reference = nki.run(V.on_chip_views, x)
    fast = nki.run(V.on_chip_views, x)
    for a, b in zip(reference.outputs, fast.outputs):
        np.testing.assert_array_equal(a, b)
    assert [r[:5] for r in reference.core.timeline.records] == [r[:5] for r in fast.core.timeline.records]


def test_a_strided_view_costs_more_vector_time_than_a_contiguous_one():
    # the view is the access pattern it is: every other column is not contiguous (bf16 perf mode lost)
    @nki.jit
    def copy_columns(x, step=1):
        tile = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        a = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=a, src=tile.slice(1, 0, 256 * step, step))
        out = nl.ndarray((128, 256), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    import ml_dtypes
    x = np.ones((128, 512), ml_dtypes.bfloat16)
    busy = [sum(r[3] - r[2] for r in nki.run(copy_columns, x, step=step, timing_only=True).core.timeline.records
                if r[1] == "tensor_copy") for step in (1, 2)]
    assert busy[1] > busy[0]


def _view_kernel(make):
    @nki.jit
    def kernel(x):
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        view = make(tile)
        out = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out
    return kernel


@pytest.mark.parametrize("make, what", [
    (lambda t: t.permute((1, 0, 2)), "partition"),
    (lambda t: t.select(0, 3), "partition"),
    (lambda t: t.flatten_dims(0, 1), "partition"),
    (lambda t: t.reshape((16, 32)), "partition"),
])
def test_views_that_move_the_partition_dim_of_an_on_chip_tile_are_refused(make, what):
    with pytest.raises(ViewError, match=what):
        nki.run(_view_kernel(make), np.zeros((32, 4, 4), np.float32))


def test_merging_dims_that_are_not_contiguous_is_not_an_access_pattern():
    make = lambda t: t.permute((0, 2, 1)).flatten_dims(1, 2)        # noqa: E731
    with pytest.raises(ViewError, match="not an access pattern"):
        nki.run(_view_kernel(make), np.zeros((8, 4, 6), np.float32))


def test_broadcast_needs_a_size_one_dim():
    with pytest.raises(ViewError, match="size-1"):
        nki.run(_view_kernel(lambda t: t.broadcast(1, 4)), np.zeros((8, 2, 3), np.float32))


def test_get_pattern_and_offset_describe_the_view():
    seen = {}

    @nki.jit
    def kernel(x):
        view = x.slice(1, 2, 10, 2).permute((1, 0))
        seen["pattern"], seen["offset"], seen["contiguous"] = view.get_pattern(), view.offset, view.is_contiguous()
        seen["whole"] = x.is_contiguous()
        out = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out

    x = np.arange(6 * 12, dtype=np.float32).reshape(6, 12)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x[:, 2:10:2].T)
    assert seen == {"pattern": [[2, 4], [12, 6]], "offset": 2, "contiguous": False, "whole": True}


@settings(max_examples=25, deadline=None)
@given(st.permutations([0, 1, 2]), st.integers(1, 3), st.integers(0, 2))
def test_permute_then_slice_matches_numpy(dims, step, start):
    x = np.arange(5 * 6 * 7, dtype=np.float32).reshape(5, 6, 7)

    @nki.jit
    def kernel(x):
        view = x.permute(tuple(dims)).slice(2, start, 99, step)
        out = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out

    expected = x.transpose(dims)[:, :, start::step]
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, expected)


def test_if_tensor_is_true_for_a_tensor_and_refused_for_a_computed_value():
    x = np.ones((128, 8), np.float32)
    np.testing.assert_array_equal(nki.run(V.optional_bias, x).outputs, x)
    np.testing.assert_array_equal(nki.run(V.optional_bias, x, 2 * x).outputs, 3 * x)

    @nki.jit
    def branch_on_a_value(x):
        t = nl.load(x)
        if nl.exp(t):
            pass
        return x

    with pytest.raises(NKIError, match="no truth value"):
        nki.run(branch_on_a_value, x)


def test_shared_constant_reads_a_npy_file(tmp_path):
    constant = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    path = tmp_path / "constant.npy"
    np.save(path, constant)
    x = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(nki.run(V.constant_from_file, x, str(path)).outputs, x + constant)


def test_a_block_of_a_block_tensor_is_selected_on_its_block_dim():
    @nki.jit
    def kernel(x):
        T, K, M = x.shape
        blocks = nl.ndarray((T, nl.par_dim(K), M), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=blocks, src=x)
        view = blocks.select(0, 2).slice(1, 0, M, 2)          # dim 0 is the block dim here, not partitions
        out = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out

    x = np.arange(4 * 16 * 8, dtype=np.float32).reshape(4, 16, 8)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x[2][:, ::2])


def test_view_as_another_dtype_reads_the_same_bytes():
    @nki.jit
    def kernel(x):
        words = x.view(nl.uint32)                              # [P, F] float32 -> [P, F] uint32, same bits
        tile = nl.ndarray(words.shape, dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=words)
        out = nl.ndarray(words.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=tile)
        return out

    x = np.random.default_rng(4).normal(size=(16, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x.view(np.uint32))


def test_reshape_infers_one_size():
    @nki.jit
    def kernel(x):
        view = x.reshape((-1, 8))
        out = nl.ndarray(view.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=view)
        return out

    x = np.arange(4 * 16, dtype=np.float32).reshape(4, 16)
    np.testing.assert_array_equal(nki.run(kernel, x).outputs, x.reshape(-1, 8))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 3), st.booleans()),
                min_size=3, max_size=3))
def test_the_pattern_of_a_sliced_view_is_the_one_its_elements_follow(axes):
    from trnlab.nki.tensor_views import pattern_of
    shape = (5, 6, 7)
    key = tuple((start % n) if as_int else slice(start % n, None, step)
                for (start, _, step, as_int), n in zip(axes, shape))
    if all(isinstance(k, int) for k in key):
        key = key[:2] + (slice(None),)
    seen = {}

    @nki.jit
    def kernel(x):
        view = x[key]
        seen["pattern"], seen["offset"], seen["contiguous"] = view.get_pattern(), view.offset, view.is_contiguous()
        return x

    nki.run(kernel, np.zeros(shape, np.float32), timing_only=True)
    flat = np.arange(5 * 6 * 7).reshape(shape)[key]
    offset, pattern = pattern_of(flat)
    assert (seen["offset"], seen["pattern"]) == (offset, pattern)
    assert seen["contiguous"] == bool(np.array_equal(flat.reshape(-1), offset + np.arange(flat.size)))


def _ap_of_a_reshaped_tile_in_a_loop():
    """A new kernel function each call: programs are cached per function, and each run here must trace."""
    def kernel(x):
        # the NKI Library's router_topk shape of access: one reshaped tile, an .ap() of it per step
        tile = nl.ndarray((128, 3, 2, 4), dtype=x.dtype, buffer=nl.sbuf)      # [P, T=3, 2, H/2=4]
        nisa.dma_copy(dst=tile, src=x.reshape((128, 3, 2, 4)))
        merged = tile.reshape((128, 3, 8))                                   # [P, T, H=8]: index arrays
        out = nl.ndarray((3, 128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for t in range(3):
            step = merged.ap(pattern=[[24, 128], [1, 8]], offset=8 * t)     # [P, H] of token t
            nisa.dma_copy(dst=out[t], src=step)
        return out
    return nki.jit(kernel)


def test_an_ap_of_a_reshaped_tile_in_a_loop_reads_what_the_reference_reads():
    from trnlab.nki import tensor_views
    x = np.arange(128 * 24, dtype=np.float32).reshape(128, 24)
    with config.override(fast=False):
        reference = nki.run(_ap_of_a_reshaped_tile_in_a_loop(), x)
    tensor_views._PATTERNS.clear()
    fast = nki.run(_ap_of_a_reshaped_tile_in_a_loop(), x)
    assert tensor_views._PATTERNS            # the fast path remembered the reshaped view's pattern
    expected = x.reshape(128, 3, 8).transpose(1, 0, 2)
    np.testing.assert_array_equal(reference.outputs, expected)
    np.testing.assert_array_equal(fast.outputs, expected)
    assert [r[:5] for r in reference.core.timeline.records] == [r[:5] for r in fast.core.timeline.records]


def test_each_view_keeps_its_own_pattern_on_the_fast_path():
    # patterns are remembered per view (tensor_views._remembered_pattern): views made one after another,
    # the earlier freed (a new view may get a freed one's id), each still gives its own
    seen = []

    @nki.jit
    def kernel(x):
        tile = nl.ndarray((128, 4, 2, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x.reshape((128, 4, 2, 4)))
        for shape in ((128, 4, 8), (128, 32), (128, 8, 4), (128, 4, 8)):
            view = tile.reshape(shape)
            pattern = view.get_pattern()
            seen.append((shape, [list(pair) for pair in pattern], view.offset))
            pattern[0][0] = -1                      # the kernel's copy: the view's own stays
            seen.append((shape, view.get_pattern(), view.offset))
        return x

    nki.run(kernel, np.zeros((128, 32), np.float32))
    strides = {(128, 4, 8): [[32, 128], [8, 4], [1, 8]], (128, 32): [[32, 128], [1, 32]],
               (128, 8, 4): [[32, 128], [4, 8], [1, 4]]}
    assert seen == [(shape, strides[shape], 0) for shape in strides for _ in (0, 1)] + \
        [((128, 4, 8), strides[(128, 4, 8)], 0)] * 2
