"""NKI 0.7's selection instructions, each against a NumPy reference in both call styles, with the fast
paths on and off, and each hardware rule's named error: max8, nc_find_index8, nc_match_replace8
(the top-8 and where it is), tensor_copy_predicated, range_select, nonzero_with_count,
sequence_bounds."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import presets
from trnlab.hardware.errors import (DtypeError, FreeSizeError, GenerationError, MemoryPlacementError,
                                    PartitionLimitError, ShapeMismatchError)

from nki_isa_helpers import compute_records, run_both


# -- max8 + nc_find_index8: the course lab's hinted arg-max --------------------------------------------
def _argmax_kernel(style):
    @nki.jit
    def argmax(x):
        P, F = x.shape
        top = nl.ndarray((P, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        where = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.shared_hbm)
        scores = nl.load(x)
        if style == "destination":
            vals = nl.ndarray((P, 8), dtype=x.dtype, buffer=nl.sbuf)
            index = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
            nisa.max8(dst=vals, src=scores)
            nisa.nc_find_index8(dst=index, data=scores, vals=vals)
        else:                                       # beta 1: the instructions return their tiles
            vals = nisa.max8(src=scores)
            index = nisa.nc_find_index8(data=scores, vals=vals)
        nl.store(top, value=vals)
        nl.store(where, value=index[:, 0:1])        # the arg-max is the index of the largest of the 8
        return top, where

    return argmax


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([1, 32, 128]), cols=st.integers(8, 300), seed=st.integers(0, 2**16),
       ties=st.booleans(), style=st.sampled_from(["destination", "functional"]))
def test_max8_and_nc_find_index8_give_the_top8_and_the_argmax(rows, cols, seed, ties, style):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, cols)).astype(np.float32)
    if ties:                                        # duplicates: each pairs with its own position
        x = np.round(x).astype(np.float32)
    run = run_both(_argmax_kernel(style), x)
    top, where = run.outputs
    np.testing.assert_array_equal(top, -np.sort(-x, axis=1)[:, :8])
    np.testing.assert_array_equal(where[:, 0], np.argmax(x, axis=1))


def test_max8_and_nc_find_index8_are_vector_instructions_of_n_cycles():
    run = nki.run(_argmax_kernel("destination"), (np.zeros((128, 300)) + np.arange(300)).astype(np.float32))
    spec = presets.core_spec("trn2")
    cycles = spec.vector_static_cycles + 300          # [nki.isa.max8], [nki.isa.nc_find_index8]: N cycles
    assert compute_records(run) == [("dve", "max8", pytest.approx(cycles * 1e9 / spec.dve_clock_hz)),
                                    ("dve", "nc_find_index8", pytest.approx(cycles * 1e9 / spec.dve_clock_hz))]


@pytest.mark.parametrize("index_dtype, sentinel", [(nl.uint32, 0xFFFFFFFF), (nl.uint16, 0xFFFF)])
def test_nc_find_index8_of_a_value_not_there_is_all_ones(index_dtype, sentinel):
    @nki.jit
    def kernel(x, wanted):
        out = nl.ndarray((x.shape[0], 8), dtype=index_dtype, buffer=nl.shared_hbm)
        index = nl.ndarray((x.shape[0], 8), dtype=index_dtype, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=index, data=nl.load(x), vals=nl.load(wanted))
        nl.store(out, value=index)
        return out

    x = np.tile(np.arange(16, dtype=np.float32), (4, 1))
    wanted = np.tile(np.array([3, 99, 0, 15, 3, 7, -1, 8], np.float32), (4, 1))
    out = run_both(kernel, x, wanted).outputs
    np.testing.assert_array_equal(out[0], [3, sentinel, 0, 15, sentinel, 7, sentinel, 8])


# -- nc_match_replace8: the top-k loop of AWS's rotational top-k ----------------------------------------
@nki.jit
def _top16(x):
    P, F = x.shape
    values = nl.ndarray((P, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    indices = nl.ndarray((P, 16), dtype=nl.uint32, buffer=nl.shared_hbm)
    work = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=work, src=nl.load(x))
    top = nl.ndarray((P, 16), dtype=x.dtype, buffer=nl.sbuf)
    where = nl.ndarray((P, 16), dtype=nl.uint32, buffer=nl.sbuf)
    for k in nl.sequential_range(2):
        nisa.max8(dst=top[:, k * 8:(k + 1) * 8], src=work)
        nisa.nc_match_replace8(dst=work, data=work, vals=top[:, k * 8:(k + 1) * 8], imm=float("-inf"),
                               dst_idx=where[:, k * 8:(k + 1) * 8])
    nl.store(values, value=top)
    nl.store(indices, value=where)
    return values, indices


def test_nc_match_replace8_in_a_loop_gives_the_top_k_and_their_indices():
    x = np.random.default_rng(1).permutation(128 * 200).reshape(128, 200).astype(np.float32)
    values, indices = run_both(_top16, x).outputs
    order = np.argsort(-x, axis=1)[:, :16]
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))
    np.testing.assert_array_equal(indices, order)


def test_nc_match_replace8_pairs_duplicate_vals_in_descending_column_order():
    """AWS's example [nki.isa.nc_match_replace8]: data [1, 2, 3, 4, 8 x 7], vals [3, 8 x 7]."""
    @nki.jit
    def kernel(x, wanted):
        replaced = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        where = nl.ndarray((x.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        index = nl.ndarray((x.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
        out = nisa.nc_match_replace8(data=nl.load(x), vals=nl.load(wanted), imm=0.0, dst_idx=index)
        nl.store(replaced, value=out)
        nl.store(where, value=index)
        return replaced, where

    x = np.array([[1, 2, 3, 4] + [8] * 7], np.float32)
    wanted = np.array([[3] + [8] * 7], np.float32)
    replaced, where = run_both(kernel, x, wanted).outputs
    np.testing.assert_array_equal(where[0], [2, 10, 9, 8, 7, 6, 5, 4])
    np.testing.assert_array_equal(replaced[0], [1, 2, 0, 4] + [0] * 7)


def _top_kernel(src_shape, dst_shape, dst_dtype=nl.float32, data_partitions=None):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(dst_shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray(dst_shape, dtype=dst_dtype, buffer=nl.sbuf)
        data = nl.load(x)
        if dst_dtype == nl.float32:
            nisa.max8(dst=dst, src=data)
        else:
            vals = nl.ndarray((src_shape[0], 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.max8(dst=vals, src=data)
            nisa.nc_find_index8(dst=dst, data=data, vals=vals)
        nl.store(out, value=dst)
        return out
    return kernel


@pytest.mark.parametrize("src_shape, dst_shape, dst_dtype, error", [
    ((4, 7), (4, 8), nl.float32, FreeSizeError),          # fewer than 8 elements read
    ((4, 16385), (4, 8), nl.float32, FreeSizeError),      # more than 16,384
    ((4, 64), (4, 4), nl.float32, ShapeMismatchError),    # dst holds exactly 8
    ((4, 64), (8, 8), nl.float32, ShapeMismatchError),    # partitions differ
    ((4, 64), (4, 8), nl.int32, DtypeError),   # indices are uint16 / uint32
])
def test_the_top8_instructions_refuse_what_the_hardware_cannot_do(src_shape, dst_shape, dst_dtype, error):
    kernel = _top_kernel(src_shape, dst_shape, dst_dtype)
    with pytest.raises(error):
        nki.run(kernel, np.zeros(src_shape, np.float32))


# -- tensor_copy_predicated ----------------------------------------------------------------------------
def test_tensor_copy_predicated_copies_psum_where_the_mask_is_set_as_attention_tkg_does():
    @nki.jit
    def kernel(scores, mask, fill):
        out = nl.ndarray(scores.shape, dtype=scores.dtype, buffer=nl.shared_hbm)
        in_psum = nl.ndarray(scores.shape, dtype=scores.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=in_psum, src=nl.load(scores))
        dst = nl.ndarray(scores.shape, dtype=scores.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=nl.load(fill))
        nisa.tensor_copy_predicated(src=in_psum, dst=dst, predicate=nl.load(mask))
        nl.store(out, value=dst)
        return out

    rng = np.random.default_rng(2)
    scores = rng.normal(size=(64, 96)).astype(np.float32)
    mask = (rng.random((64, 96)) < 0.5).astype(np.uint8)
    fill = np.full((64, 96), -1e4, np.float32)
    run = run_both(kernel, scores, mask, fill)
    np.testing.assert_array_equal(run.outputs, np.where(mask != 0, scores, fill))
    spec = presets.core_spec("trn2")
    predicated = [r for r in compute_records(run) if r[1] == "tensor_copy_predicated"]
    # [nki.isa.tensor_copy_predicated]: max(MIN_II, N) with src in PSUM and predicate in SBUF
    assert predicated == [("dve", "tensor_copy_predicated",
                           pytest.approx((spec.vector_static_cycles + 96) * 1e9 / spec.dve_clock_hz))]


def test_tensor_copy_predicated_of_a_number_with_reverse_pred_fills_where_the_mask_is_clear():
    @nki.jit
    def kernel(x, mask):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=nl.load(x))
        nisa.tensor_copy_predicated(dst, 7.0, nl.load(mask), True)     # positional, AWS's order
        nl.store(out, value=dst)
        return out

    x = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    mask = (x % 3 == 0).astype(np.uint16)
    np.testing.assert_array_equal(run_both(kernel, x, mask).outputs, np.where(mask == 0, 7.0, x))


@pytest.mark.parametrize("case, error", [("float predicate", DtypeError), ("dtype mismatch", DtypeError),
                                         ("reverse with a tile", DtypeError), ("both in psum", MemoryPlacementError)])
def test_tensor_copy_predicated_refuses_what_the_hardware_cannot_do(case, error):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=0.0)
        pred = nl.ndarray(x.shape, dtype=nl.float32 if case == "float predicate" else nl.uint8,
                          buffer=nl.psum if case == "both in psum" else nl.sbuf)
        nisa.memset(dst=pred, value=1)
        src = nl.ndarray(x.shape, dtype=nl.bfloat16 if case == "dtype mismatch" else x.dtype,
                         buffer=nl.psum if case == "both in psum" else nl.sbuf)
        nisa.memset(dst=src, value=2.0)
        nisa.tensor_copy_predicated(dst=dst, src=src, predicate=pred, reverse_pred=case == "reverse with a tile")
        nl.store(out, value=dst)
        return out

    with pytest.raises(error):
        nki.run(kernel, np.zeros((16, 16), np.float32))


# -- range_select: a sliding-window mask with its row max, as AWS's attention backward writes it --------
def _window_kernel(style):
    @nki.jit
    def kernel(scores, low, high):
        P, F = scores.shape
        out = nl.ndarray((P, F), dtype=scores.dtype, buffer=nl.shared_hbm)
        row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        masked = nl.ndarray((P, F), dtype=scores.dtype, buffer=nl.sbuf)
        biggest = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        if style == "destination":
            nisa.range_select(dst=masked, on_true_tile=nl.load(scores), on_false_value=-3.0e38,
                              comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=nl.load(low),
                              bound1=nl.load(high), reduce_op=nl.maximum, reduce_res=biggest,
                              reduce_cmd=nisa.reduce_cmd.reset_reduce, range_start=64)
        else:
            masked = nisa.range_select(nl.load(scores), nl.greater_equal, nl.less, nl.load(low), nl.load(high),
                                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=biggest,
                                       range_start=64, on_false_value=-3.0e38)
        nl.store(out, value=masked)
        nl.store(row_max, value=biggest)
        return out, row_max

    return kernel


@pytest.mark.parametrize("style", ["destination", "functional"])
def test_range_select_keeps_the_window_of_each_row_and_its_max(style):
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(128, 80)).astype(np.float32)
    low = rng.integers(40, 100, size=(128, 1)).astype(np.float32)
    high = low + rng.integers(1, 60, size=(128, 1)).astype(np.float32)
    out, row_max = run_both(_window_kernel(style), scores, low, high).outputs
    position = np.arange(80)[None, :] + 64
    expected = np.where((position >= low) & (position < high), scores, np.float32(-3.0e38))
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(row_max[:, 0], expected.max(axis=1))


def test_range_select_is_neuroncore_v3_and_newer():
    with pytest.raises(GenerationError):
        nki.run(_window_kernel("destination"), np.zeros((8, 8), np.float32), np.zeros((8, 1), np.float32),
                np.ones((8, 1), np.float32), target="trn1")


# -- nonzero_with_count: one row per GpSimd core ---------------------------------------------------------
@nki.jit
def _nonzero(x, base):
    P, F = x.shape
    out = nl.ndarray((P, F + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    dst = nl.ndarray((P, F + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dst, src=nl.load(base))
    nisa.nonzero_with_count(dst=dst, src=nl.load(x), index_offset=100, padding_val=-1)
    nl.store(out, value=dst)
    return out


def test_nonzero_with_count_writes_indices_padding_and_count_on_every_16th_partition():
    rng = np.random.default_rng(4)
    x = (rng.random((128, 24)) < 0.3).astype(np.float32) * rng.normal(size=(128, 24)).astype(np.float32)
    base = np.full((128, 25), 7, np.int32)
    out = run_both(_nonzero, x, base, target="trn2").outputs
    for p in range(128):
        if p % 16:
            np.testing.assert_array_equal(out[p], base[p])          # other partitions unchanged
            continue
        hits = np.flatnonzero(x[p])
        expected = np.full(25, -1)
        expected[:hits.size] = hits + 100
        expected[-1] = hits.size
        np.testing.assert_array_equal(out[p], expected)


def test_nonzero_with_count_rules():
    with pytest.raises(GenerationError):
        nki.run(_nonzero, np.zeros((16, 8), np.float32), np.zeros((16, 9), np.int32), target="trn1")
    with pytest.raises(ShapeMismatchError):
        nki.run(_nonzero, np.zeros((16, 8), np.float32), np.zeros((16, 8), np.int32))


@nki.jit
def _nonzero_of_one_row(x, store_row: int = 0):
    # x [1, T]: loaded into partition 0 of a [128, T] tile (the others never written), found on every
    # 16th partition by the GpSimd cores, and row `store_row` of the result stored
    T = x.shape[1]
    tile = nl.ndarray((128, T), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile[0, :], src=x[0, :])
    found = nl.ndarray((128, T + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.nonzero_with_count(dst=found, src=tile, index_offset=0, padding_val=-1)
    out = nl.ndarray((1, T + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0, :], src=found[store_row, :])
    return out


def test_nonzero_with_count_of_never_written_partitions_gives_garbage_rows_that_only_a_store_rejects():
    x = np.zeros((1, 32), np.float32)
    x[0, [3, 17]] = 1.0
    out = run_both(_nonzero_of_one_row, x, target="trn2").outputs
    np.testing.assert_array_equal(out[0], [3, 17] + [-1] * 30 + [2])
    with pytest.raises(Exception, match=r"uninitialized read: 33 of 33 elements .*\[16, 0:33\] hold garbage .*"
                                        r"nonzero_with_count read never-written .* partition 16"):
        nki.run(_nonzero_of_one_row, x, store_row=16, target="trn2")


# -- sequence_bounds ---------------------------------------------------------------------------------------
def _bounds_reference(ids):
    n = len(ids)
    start, end = np.zeros(n), np.zeros(n)
    for i in range(n):
        start[i] = n if ids[i] == 0 else (start[i - 1] if i and ids[i] == ids[i - 1] else i)
    for i in reversed(range(n)):
        end[i] = -1 if ids[i] == 0 else (end[i + 1] if i + 1 < n and ids[i] == ids[i + 1] else i + 1)
    return np.stack([start, end])


@pytest.mark.parametrize("style", ["destination", "functional"])
@given(ids=st.lists(st.integers(0, 3), min_size=1, max_size=64))
@settings(max_examples=8, deadline=None)
def test_sequence_bounds_gives_each_segments_start_and_end(style, ids):
    @nki.jit
    def kernel(segment_ids):
        out = nl.ndarray((1, 2, segment_ids.shape[1]), dtype=nl.int32, buffer=nl.shared_hbm)
        if style == "destination":
            bounds = nl.ndarray((1, 2, segment_ids.shape[1]), dtype=nl.int32, buffer=nl.sbuf)
            nisa.sequence_bounds(dst=bounds, segment_ids=nl.load(segment_ids))
        else:
            bounds = nisa.sequence_bounds(segment_ids=nl.load(segment_ids))
        nl.store(out, value=bounds)
        return out

    segment_ids = np.array([ids], np.int32)
    out = run_both(kernel, segment_ids).outputs
    np.testing.assert_array_equal(out[0], _bounds_reference(segment_ids[0]))


def test_sequence_bounds_takes_one_partition():
    @nki.jit
    def kernel(segment_ids):
        out = nl.ndarray((2, 2, 8), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.sequence_bounds(segment_ids=nl.load(segment_ids)))
        return out

    with pytest.raises(PartitionLimitError):
        nki.run(kernel, np.ones((2, 8), np.int32))


# -- topk: eight 16-partition problems in one GpSimd instruction ------------------------------------------
def _topk_kernel(k, n, keep_positions):
    @nki.jit
    def kernel(x):
        P, F = x.shape
        values = nl.ndarray((P, keep_positions), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        indices = nl.ndarray((P, keep_positions), dtype=nl.uint32, buffer=nl.shared_hbm)
        top = nl.ndarray((P, k), dtype=nl.bfloat16, buffer=nl.sbuf)
        where = nl.ndarray((P, k), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(top, where, nl.load(x), n)                         # AWS's order: (val_dst, idx_dst, src, n)
        nl.store(values, value=top[:, 0:keep_positions])
        nl.store(indices, value=where[:, 0:keep_positions])
        return values, indices

    return kernel


@pytest.mark.parametrize("k, n", [(32, 300), (16, 16), (64, 512)])
def test_topk_solves_each_16_partition_group_in_its_snake_layout(k, n):
    import ml_dtypes
    rng = np.random.default_rng(12)
    x = rng.permutation(128 * 32).reshape(128, 32).astype(ml_dtypes.bfloat16)   # distinct bf16 values
    positions = k // 16
    values, indices = run_both(_topk_kernel(k, n, positions), x).outputs
    for group in range(8):
        snake = x[group * 16:(group + 1) * 16].astype(np.float32).reshape(-1, order="F")[:n]
        order = np.argsort(-snake, kind="stable")[:k]
        got_index = indices[group * 16:(group + 1) * 16].reshape(-1, order="F")     # result j: (j % 16, j // 16)
        got_value = values[group * 16:(group + 1) * 16].astype(np.float32).reshape(-1, order="F")
        np.testing.assert_array_equal(got_index, order)
        np.testing.assert_array_equal(got_value, snake[order])


def test_topk_rules():
    import ml_dtypes
    x = np.zeros((128, 4), ml_dtypes.bfloat16)
    with pytest.raises(ShapeMismatchError):                  # n beyond a group's 16 x 4 slots
        nki.run(_topk_kernel(16, 65, 1), x)
    with pytest.raises(DtypeError):                          # BF16 values
        nki.run(_topk_kernel(16, 16, 1), x.astype(np.float32))


def test_the_top_k_loop_in_timing_mode_costs_the_same_and_survives_a_json_round_trip(tmp_path):
    from trnlab.hardware.device import Device
    from trnlab.hardware.program import Program
    x = np.random.default_rng(13).normal(size=(128, 200)).astype(np.float32)
    full = nki.run(_top16, x)
    timing = nki.run(_top16, nki.ShapeDtype((128, 200), nl.float32), timing_only=True)
    assert timing.latency_ns == pytest.approx(full.latency_ns)
    program = nki.trace(_top16, x)
    program.save(tmp_path / "top16.json")
    loaded = Program.load(tmp_path / "top16.json")
    again = Device("trn2", cores=1).run(loaded, x)
    for a, b in zip(again.outputs, full.outputs):
        np.testing.assert_array_equal(a, b)
