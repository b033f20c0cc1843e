"""NKI's allocation modes (``CompileConfig(allocation=Allocation.LINEAR, experimental_allocation_mode=...)``,
nki.compiler.AllocationMode): RING gives each tile fresh bytes until the memory wraps, MAX_REUSE puts each
tile in the freed gap that fits it best, FAST stacks a tile whose live range nests in that of the tile placed
last and places the rest best fit (`trnlab/hardware/allocate.py`). Each mode keeps live tiles apart and within
the memory and its banks; each trades memory for overlap as AWS's page says."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import presets
from trnlab.hardware.allocate import allocate, high_water
from trnlab.hardware.allocation_modes import MODES, best_fit
from trnlab.hardware.errors import HardwareError
from trnlab.hardware.program import Buffer, Program
from test_hardware_allocate_walk import buffer_rows, table_program

LINEAR = ncc.Allocation.LINEAR


def scaled_rows(x):
    """Each [128, 512] row tile of x loaded, exp'd and stored: two tiles allocated per iteration."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        tile = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[i * 128:(i + 1) * 128, :])
        result = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=result, op=nl.exp, data=tile)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=result)
    return out


def configured(kernel, mode):
    return nki.jit(kernel, compile_config=ncc.CompileConfig(allocation=LINEAR, experimental_allocation_mode=mode))


ROWS = nki.ShapeDtype((128 * 16, 512), "float32")


def test_ring_gives_loop_tiles_fresh_bytes_and_max_reuse_the_bytes_just_freed():
    ring = nki.trace(configured(scaled_rows, ncc.AllocationMode.RING), ROWS, target="trn2")
    reuse = nki.trace(configured(scaled_rows, ncc.AllocationMode.MAX_REUSE), ROWS, target="trn2")
    assert (ring.allocation_mode, reuse.allocation_mode) == ("ring", "max_reuse")
    offsets = lambda p: {b.offset for b in p.buffers if b.memory == "sbuf" and b.first >= 0}
    assert len(offsets(ring)) == 32 and high_water(ring) == 32 * 2048        # every tile its own bytes
    assert len(offsets(reuse)) == 2 and high_water(reuse) == 2 * 2048        # two tiles' bytes, reused


def test_max_reuse_uses_less_memory_and_overlaps_loads_with_compute_less():
    latency = {}
    for mode in (ncc.AllocationMode.RING, ncc.AllocationMode.MAX_REUSE):
        latency[mode] = nki.run(configured(scaled_rows, mode), ROWS, target="trn2", timing_only=True).launch.latency_ns
    # with one address per tile, each load waits for the previous iteration's readers of those bytes
    assert latency[ncc.AllocationMode.MAX_REUSE] > 1.3 * latency[ncc.AllocationMode.RING]


@pytest.mark.parametrize("mode", list(ncc.AllocationMode))
def test_every_mode_computes_what_the_unconfigured_kernel_does(mode):
    x = np.random.default_rng(3).standard_normal((128 * 4, 512)).astype(np.float32)
    np.testing.assert_allclose(configured(scaled_rows, mode)(x), np.exp(x), rtol=1e-5)


def _program(rows: list) -> Program:
    """float32 SBUF tiles [128, elements], one per (name, first, last, elements) row."""
    program = Program(name="modes", target=presets.TRN2.core.name)
    for i, (name, first, last, elements) in enumerate(rows):
        program.buffers.append(Buffer(id=i, name=name, memory="sbuf", shape=(128, elements), dtype="float32",
                                      partition_axis=0, first=first, last=last))
    return program


def _offsets(rows: list, mode: str) -> dict:
    program = _program(rows)
    program.allocation_mode = mode
    allocate(program, presets.TRN2.core)
    return {b.name: b.offset for b in program.buffers}


# a [0, 4) long-lived, b freed at 2 leaving a 1 KiB hole below c, then d nested in c's live range
HOLE = [("a", 0, 9, 256), ("b", 0, 2, 256), ("c", 1, 8, 1024), ("d", 3, 5, 256)]


def test_max_reuse_puts_a_tile_in_the_smallest_gap_that_holds_it():
    placed = _offsets(HOLE, "max_reuse")
    assert placed["b"] == 1024 and placed["c"] == 2048
    assert placed["d"] == 1024                      # b's freed 1 KiB, not the rest of the memory above c


def test_fast_stacks_a_tile_nested_in_the_live_range_of_the_tile_placed_last():
    placed = _offsets(HOLE, "fast")
    assert placed["d"] == placed["c"] + 4096        # directly above c, whose live range holds d's


def test_fast_places_a_tile_that_outlives_the_tile_placed_last_best_fit():
    rows = HOLE[:3] + [("e", 3, 9, 256)]            # e lives past c: not nested, so best fit (b's hole)
    assert _offsets(rows, "fast")["e"] == 1024


def test_ring_places_next_fit_after_the_last_placement():
    assert _offsets(HOLE, "ring")["d"] == 2048 + 4096


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30000), st.integers(1, 3000)), max_size=8),
       st.integers(1, 5000), st.sampled_from([None, 2048]))
def test_best_fit_returns_the_smallest_free_gap_that_holds_the_tile(ranges, nbytes, bank):
    capacity = 16384 if bank else 32768
    occupied, end = [], 0
    for offset, size in sorted(ranges):             # disjoint live tiles within the memory
        offset = max(offset, end)
        if offset + size > capacity:
            break
        occupied.append((offset, size))
        end = offset + size
    got = best_fit(occupied, nbytes, capacity, bank)
    # every gap, and where in it the tile would start under the bank rule
    edges = [0] + [o + n for o, n in occupied]
    starts = [o for o, _ in occupied] + [capacity]
    fits = []
    for lo, hi in zip(edges, starts):
        start = lo if not bank or (nbytes <= bank and lo // bank == (lo + nbytes - 1) // bank) else -(-lo // bank) * bank
        if hi > lo and start + nbytes <= hi:
            fits.append((hi - lo, start))
    assert got == (min(fits)[1] if fits else None)


@settings(max_examples=150, deadline=None)
@given(buffer_rows, st.integers(0, 15), st.sampled_from(MODES))
def test_every_mode_keeps_live_tiles_apart_within_the_memory_and_its_banks(rows, direct_offset_kib, mode):
    spec = presets.TRN2.core
    program = table_program(rows, direct_offset_kib)
    program.allocation_mode = mode
    try:
        allocate(program, spec)
    except HardwareError:
        return                                      # an overflow or overlap, named (the walk's tests check which)
    placed = [b for b in program.buffers if b.on_chip and b.first >= 0]
    for b in placed:
        capacity = spec.sbuf_partition_bytes if b.memory == "sbuf" else spec.psum_partition_bytes
        assert 0 <= b.offset and b.offset + b.partition_bytes <= capacity
        if b.memory == "psum" and not b.placement and 0 < b.partition_bytes <= spec.psum_bank_bytes:
            assert b.offset // spec.psum_bank_bytes == (b.offset + b.partition_bytes - 1) // spec.psum_bank_bytes
    for i, b in enumerate(placed):
        for c in placed[i + 1:]:
            if b.memory == c.memory and b.first <= c.last and c.first <= b.last and b.partition_bytes and c.partition_bytes:
                assert b.offset + b.partition_bytes <= c.offset or c.offset + c.partition_bytes <= b.offset


def test_the_mode_is_saved_with_the_program(tmp_path):
    program = nki.trace(configured(scaled_rows, ncc.AllocationMode.FAST), ROWS, target="trn2")
    program.save(tmp_path / "fast.json")
    assert Program.load(tmp_path / "fast.json").allocation_mode == "fast"
    plain = nki.trace(nki.jit(scaled_rows), ROWS, target="trn2")
    assert plain.allocation_mode == "ring" and "allocation_mode" not in plain.to_json()


def test_an_unknown_mode_is_refused_by_name():
    program = _program(HOLE)
    program.allocation_mode = "first_fit"
    with pytest.raises(ValueError, match="allocation mode 'first_fit'"):
        allocate(program, presets.TRN2.core)
