"""Tracing at production speed, the same program as the reference: kernels of our own written the way
AWS writes its tutorial and NKI Library kernels today trace to the same program with the fast paths
(`config.fast()`) as with ``TRNLAB_FAST=0``.

- AWS's current tutorial matmul style (``nl.ndarray`` tiles allocated inside ``nl.affine_range``
  loops, ``nisa.dma_copy`` / ``nisa.nc_matmul(dst=...)`` / ``nisa.tensor_copy(dtype=...)``, the tile
  sizes read from ``nl.tile_size``): every loop stamps, nothing falls back;
- ``.ap()`` access patterns over HBM tensors whose offset is index arithmetic (the NKI Library's
  rope kernels): the fast path builds the index arrays from the pattern alone
  (`tensor_views.pattern_index`) — the same arrays as NumPy's unravel of every position.
Nothing here is timed (benchmarks/bench_first_run.py measures)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.nki import loops
from trnlab.nki import tensor_views as views

SD = nki.ShapeDtype


def _trace(kernel, *args, fast: bool):
    nki._PROGRAMS.clear()
    try:
        with config.override(fast=fast):
            return nki.trace(kernel, *args, target="trn2")
    finally:
        nki._PROGRAMS.clear()


# -- kernels of our own in AWS's current style ---------------------------------------------------
@nki.jit
def tutorial_style_matmul(lhsT, rhs):
    """[K, M] x [K, N] -> [M, N], tiles declared with nl.ndarray inside the loops (AWS's tutorial style)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.ndarray((TILE_M, TILE_N), nl.float32, buffer=nl.psum)      # [128, 512] fp32
            for k in nl.affine_range(K // TILE_K):
                a = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=b, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            out = nl.ndarray(acc.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc, dtype=result.dtype)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=out)
    return result


@nki.jit
def rope_style_scale(x, scale):
    """x [B, H, S, D] * scale [S, D], S in tiles of 128 rows x `tiles` blocks read by .ap() patterns
    whose offsets are index arithmetic on the loop variables (the NKI Library's rope layout)."""
    B, H, S, D = x.shape
    tiles = S // 128
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    s_tile = nl.ndarray((128, tiles, D), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(s_tile, scale.ap(pattern=[[D, 128], [128 * D, tiles], [1, D]], offset=0))
    for b in range(B):
        for h in range(H):
            t = nl.ndarray((128, tiles, D), dtype=x.dtype, buffer=nl.sbuf)
            offset = b * H * S * D + h * S * D
            nisa.dma_copy(t, x.ap(pattern=[[D, 128], [128 * D, tiles], [1, D]], offset=offset))
            y = nl.ndarray((128, tiles, D), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=y, data1=t, data2=s_tile, op=nl.multiply)
            nisa.dma_copy(out.ap(pattern=[[D, 128], [128 * D, tiles], [1, D]], offset=offset), y)
    return out


needs_stamping = pytest.mark.skipif(sys.version_info[:2] != loops.STAMPING_PYTHON,
                                    reason="loop stamping runs on CPython 3.11 only (nki/loops.py)")


@needs_stamping
def test_tutorial_style_matmul_stamps_every_loop_and_gives_the_reference_program():
    args = (SD((512, 256), "bfloat16"), SD((512, 2048), "bfloat16"))
    fast = _trace(tutorial_style_matmul, *args, fast=True)
    assert loops.fallbacks == []                      # no loop ran concretely
    reference = _trace(tutorial_style_matmul, *args, fast=False)
    assert loops.first_difference(fast, reference) == ""
    assert [b.offset for b in fast.buffers] == [b.offset for b in reference.buffers]


def test_rope_style_access_patterns_give_the_reference_program_and_values():
    args = (SD((2, 3, 256, 64), "float32"), SD((256, 64), "float32"))
    fast = _trace(rope_style_scale, *args, fast=True)
    reference = _trace(rope_style_scale, *args, fast=False)
    assert loops.first_difference(fast, reference) == ""
    x = np.random.default_rng(1).normal(size=args[0].shape).astype(np.float32)
    scale = np.random.default_rng(2).normal(size=args[1].shape).astype(np.float32)
    for switch in (True, False):
        with config.override(fast=switch):
            np.testing.assert_array_equal(nki.run(rope_style_scale, x, scale).outputs, x * scale)


def test_an_access_pattern_past_the_tensor_is_refused_alike_with_and_without_the_fast_path():
    @nki.jit
    def past_the_end(x):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x.ap(pattern=[[64, 128], [1, 64]], offset=64))
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out
    messages = []
    for switch in (True, False):
        with pytest.raises(Exception) as error:
            _trace(past_the_end, SD((128, 64), "float32"), fast=switch)
        messages.append((type(error.value), str(error.value)))
    assert messages[0] == messages[1] and "out-of-bounds access pattern" in messages[0][1]


# -- the index arrays of a pattern, from the pattern alone -----------------------------------------
@st.composite
def _patterns(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    size = int(np.prod(shape))
    pattern = [[draw(st.integers(-size, size)), draw(st.integers(1, 5))]
               for _ in range(draw(st.integers(1, 3)))]
    low = sum(min(0, s * (c - 1)) for s, c in pattern)
    high = sum(max(0, s * (c - 1)) for s, c in pattern)
    if high - low >= size:                  # no start keeps it inside: walk less far
        pattern = [[s, 1] for s, _ in pattern]
        low = high = 0
    start = draw(st.integers(-low, size - 1 - high))
    return shape, pattern, start


@settings(max_examples=150, deadline=None)
@given(_patterns())
def test_pattern_index_is_numpys_unravel_of_every_position(case):
    shape, pattern, start = case
    flat = np.asarray(start, dtype=np.int64)
    for axis, (stride, count) in enumerate(pattern):
        line = [1] * len(pattern)
        line[axis] = count
        flat = flat + stride * np.arange(count, dtype=np.int64).reshape(line)
    expected = np.unravel_index(flat, shape)
    got = views.pattern_index(pattern, start, shape)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape and np.array_equal(g, e)
    assert views.pattern_bounds(pattern, start) == (int(flat.min()), int(flat.max()))


def _held_bytes(array: np.ndarray) -> int:
    """Bytes of the buffer an array (or the view it is) keeps alive."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array.nbytes


def test_pattern_index_holds_the_patterns_lines_not_one_integer_per_element():
    # issue 21: the NKI Library's MoE kernels read [128, 3584] tiles by .ap patterns that are not
    # boxes (here: a transposing walk of a [64 tokens, 3584] HBM tensor), thousands of them; an index
    # array of int64 per element (3.5 MiB per coordinate) filled the 12 GiB the harness allows
    pattern, shape = [[1, 3584], [3584, 64]], (64, 3584)        # view [3584, 64]: element (h, t) at [t, h]
    rows, columns = views.pattern_index(pattern, 0, shape)
    assert rows.shape == columns.shape == (3584, 64)
    assert np.array_equal(rows, np.broadcast_to(np.arange(64), (3584, 64)))
    assert np.array_equal(columns, np.broadcast_to(np.arange(3584)[:, None], (3584, 64)))
    assert _held_bytes(rows) <= 64 * 8 and _held_bytes(columns) <= 3584 * 8


_ap_indices: list = []


@nki.jit
def transposing_load(x):
    """out = x.T, read by the .ap pattern [[1, H], [H, T]] (a walk across x's rows: not a box)."""
    T, H = x.shape
    view = x.ap([[1, H], [H, T]], offset=0)                    # [H, T]: element (h, t) at x[t, h]
    _ap_indices.append(view._index)
    tile = nl.ndarray((H, T), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=view)
    out = nl.ndarray((H, T), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("fast", [True, False])
def test_an_ap_view_holds_its_coordinates_lines_with_or_without_the_fast_path(fast):
    # issue 21: with TRNLAB_FAST=0 the reference computes every element's position, then keeps each
    # coordinate as the lines it repeats (views.repeated_lines): the MoE kernels' thousands of views
    # held an int64 per element and ran out of the harness's 12 GiB
    T = 64 if fast else 48                  # a shape of its own: a trace of its own (traces are cached)
    x = np.arange(T * 128, dtype=np.float32).reshape(T, 128)
    _ap_indices.clear()
    with config.override(fast=fast):
        np.testing.assert_array_equal(nki.run(transposing_load, x).outputs, x.T)
    rows, columns = _ap_indices[0]
    assert np.array_equal(rows, np.broadcast_to(np.arange(T), (128, T)))
    assert np.array_equal(columns, np.broadcast_to(np.arange(128)[:, None], (128, T)))
    assert _held_bytes(rows) <= T * 8 and _held_bytes(columns) <= 128 * 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.lists(st.integers(0, 1), min_size=len(shape),
                                                             max_size=len(shape)))))
def test_repeated_lines_are_the_same_values(case):
    shape, varies = case
    coordinate = np.zeros(shape, np.int64)
    for axis, v in enumerate(varies):
        if v:
            line = [1] * len(shape)
            line[axis] = shape[axis]
            coordinate = coordinate + np.arange(shape[axis]).reshape(line) * (axis + 1)
    kept = views.repeated_lines(np.ascontiguousarray(coordinate))
    assert kept.shape == coordinate.shape and np.array_equal(kept, coordinate)
    assert _held_bytes(kept) <= 8 * int(np.prod([n for n, v in zip(shape, varies) if v]))


@nki.jit
def ap_in_affine_loop(x, w):
    """out[c] = w[c] . windows of x[c] — per channel c an nl.affine_range iteration whose loads are
    .ap() patterns with offsets in c (the NKI Library's depthwise conv layout, [C, W] and [C, S])."""
    C, W = x.shape
    _, S = w.shape
    Q = W - S + 1
    out = nl.ndarray((C, Q), dtype=x.dtype, buffer=nl.shared_hbm)
    for c in nl.affine_range(C):
        window = nl.ndarray((S, Q), dtype=x.dtype, buffer=nl.sbuf)          # [S partitions, Q]
        nisa.dma_copy(dst=window, src=x.ap(pattern=[[1, S], [1, Q]], offset=c * W))
        weights = nl.ndarray((S, 1), dtype=w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=weights, src=w.ap(pattern=[[1, S], [1, 1]], offset=c * S))
        acc = nl.ndarray((1, Q), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=weights, moving=window)
        row = nl.ndarray((1, Q), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=row, src=acc)
        nisa.dma_copy(dst=out.ap(pattern=[[Q, 1], [1, Q]], offset=c * Q), src=row)
    return out


@needs_stamping
def test_a_loop_whose_access_patterns_move_with_its_index_stamps_and_gives_the_reference_program():
    args = (SD((8, 96), "float32"), SD((8, 32), "float32"))
    count = [0]
    original = loops.Loop.after_second

    def counting(self):
        original(self)
        count[0] += self.degraded is None
    loops.Loop.after_second = counting
    try:
        fast = _trace(ap_in_affine_loop, *args, fast=True)
    finally:
        loops.Loop.after_second = original
    assert count[0] == 1 and loops.fallbacks == []           # the channel loop stamped
    reference = _trace(ap_in_affine_loop, *args, fast=False)
    assert loops.first_difference(fast, reference) == ""
    x = np.random.default_rng(3).normal(size=args[0].shape).astype(np.float32)
    w = np.random.default_rng(4).normal(size=args[1].shape).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x, 32, axis=1)          # [C, Q, S]
    expected = np.einsum("cqs,cs->cq", windows, w)
    np.testing.assert_allclose(nki.run(ap_in_affine_loop, x, w).outputs, expected, rtol=1e-4, atol=1e-4)


@nki.jit
def remainder_tiles(x):
    """Copy x [S, 64] through SBUF in tiles of 128 rows, the last one shorter (AWS's
    ``size = min(TILE, S - start)`` idiom): a comparison whose answer changes in the last iteration."""
    S, F = x.shape
    TILE = nl.tile_size.pmax
    out = nl.ndarray((S, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for k in nl.affine_range((S + TILE - 1) // TILE):
        start = k * TILE
        size = min(TILE, S - start)
        t = nl.ndarray((TILE, F), dtype=x.dtype, buffer=nl.sbuf)
        if size < TILE:
            nisa.memset(t, 0)                   # only the remainder tile
        nisa.dma_copy(dst=t[0:size, :], src=x[start:start + size, :])
        nisa.dma_copy(dst=out[start:start + size, :], src=t[0:size, :])
    return out


def _stamps(kernel, *args) -> tuple:
    """(how many loop executions stamped, did one peel its last iteration), tracing with the fast paths."""
    seen = []
    original = loops.Loop.after_second

    def watching(self):
        original(self)
        if self.degraded is None:
            seen.append(self)
    loops.Loop.after_second = watching
    try:
        program = _trace(kernel, *args, fast=True)
    finally:
        loops.Loop.after_second = original
    return program, len(seen), any(loop.peel for loop in seen)


@needs_stamping
@pytest.mark.parametrize("rows, stamps, peeled", [(128 * 6 - 3, 1, True), (128 * 6, 1, False),
                                                  (128 * 4 + 1, 1, True), (128 * 3 + 1, 0, False)])
def test_a_remainder_tile_peels_the_last_iteration_and_gives_the_reference_program(rows, stamps, peeled):
    args = (SD((rows, 64), "float32"),)
    fast, stamped, peel = _stamps(remainder_tiles, *args)
    assert (stamped, peel) == (stamps, peeled)             # 5 iterations is the least a loop peels
    assert loops.first_difference(fast, _trace(remainder_tiles, *args, fast=False)) == ""
    x = np.random.default_rng(5).normal(size=(rows, 64)).astype(np.float32)
    np.testing.assert_array_equal(nki.run(remainder_tiles, x).outputs, x)


@nki.jit
def changes_midway(x):
    """A comparison whose answer changes in the middle of the loop: not peeled, traced concretely."""
    S, F = x.shape
    out = nl.ndarray((S, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for k in nl.affine_range(S // 128):
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[k * 128:(k + 1) * 128, :])
        if k * 128 >= S // 2:
            nisa.memset(t, 0)
        nisa.dma_copy(dst=out[k * 128:(k + 1) * 128, :], src=t)
    return out


@needs_stamping
def test_a_comparison_that_changes_midway_is_not_peeled():
    args = (SD((128 * 8, 32), "float32"),)
    fast, stamped, _ = _stamps(changes_midway, *args)
    assert stamped == 0
    assert loops.first_difference(fast, _trace(changes_midway, *args, fast=False)) == ""


@nki.jit
def hoisted_loads(lhsT, rhs):
    """AWS's hoisted-load tutorial style: each K column of tiles loaded once into a Python list
    (``tiles.append(t)``), then read by index in the matmul loop."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        lhsT_tiles = []
        for k in nl.affine_range(K // 128):
            t = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
            lhsT_tiles.append(t)
        for n in nl.affine_range(N // 512):
            rhs_tiles = []
            for k in nl.affine_range(K // 128):
                t = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                rhs_tiles.append(t)
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                nisa.nc_matmul(dst=acc, stationary=lhsT_tiles[k], moving=rhs_tiles[k])
            out = nl.ndarray((128, 512), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=out)
    return result


@needs_stamping
def test_loops_that_append_their_tiles_to_a_list_stamp_and_give_the_reference_program():
    args = (SD((768, 512), "float32"), SD((768, 2048), "float32"))
    fast, stamped, _ = _stamps(hoisted_loads, *args)
    assert loops.fallbacks == [] and stamped > 0
    assert loops.first_difference(fast, _trace(hoisted_loads, *args, fast=False)) == ""
    a = np.random.default_rng(6).normal(size=args[0].shape).astype(np.float32)
    b = np.random.default_rng(7).normal(size=args[1].shape).astype(np.float32)
    np.testing.assert_allclose(nki.run(hoisted_loads, a, b).outputs, a.T @ b, rtol=1e-4, atol=1e-3)


@nki.jit
def appends_views(x):
    """Appends a view of each tile (not the tile itself): the loop runs concretely."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    halves = []
    for r in nl.affine_range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r * 128:(r + 1) * 128, :])
        halves.append(t[0:64, :])
    for r in nl.affine_range(R // 128):
        nisa.dma_copy(dst=out[r * 128:r * 128 + 64, :], src=halves[r])
    return out


@needs_stamping
def test_a_list_of_views_is_not_stamped_and_still_gives_the_reference_program():
    args = (SD((128 * 6, 32), "float32"),)
    fast = _trace(appends_views, *args, fast=True)
    assert any("halves" in why for _, why in loops.fallbacks)
    assert loops.first_difference(fast, _trace(appends_views, *args, fast=False)) == ""
