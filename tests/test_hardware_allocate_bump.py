"""Allocation by liveness, the two shortcuts of `allocate.py`: a run of events where every live
tile lies below the cursor is placed at once (`_Bump`: next fit puts each tile at the cursor), and
the rows of stamped buffers come from the loop stamper's arrays (`StampedTiles`) rather than from
the buffer objects. Both must give exactly the offsets, and the errors, of the plain walk."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware import allocate as allocation
from trnlab.hardware import presets
from test_hardware_allocate_walk import buffer_rows, fast_offsets, reference_offsets, table_program

SD = nki.ShapeDtype


@pytest.fixture(autouse=True)
def _fast_paths_on():
    """The shortcuts are fast paths: on here, even in CI's run with TRNLAB_FAST=0."""
    with config.override(fast=True):
        yield




@settings(max_examples=300, deadline=None)
@given(buffer_rows, st.integers(0, 15))
def test_property_bump_runs_of_any_length_place_every_tile_where_the_plain_walk_does(rows, direct_offset_kib):
    spec = presets.TRN2.core
    expected = reference_offsets(table_program(rows, direct_offset_kib), spec)
    shortest = allocation._MIN_STRETCH
    allocation._MIN_STRETCH = 1                  # a run from every event where one may start
    try:
        assert fast_offsets(table_program(rows, direct_offset_kib), spec) == expected
    finally:
        allocation._MIN_STRETCH = shortest


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([64, 256, 512, 2048, 4096, 12288]), min_size=40, max_size=400),
       st.integers(1, 4), st.integers(0, 3))
def test_property_a_rotating_stream_of_tiles_wraps_sbuf_like_the_plain_walk(elements, live, long_lived):
    """Tiles allocated one after the other, each live for a few instructions (a loop's multi-
    buffered loads), with a few that stay live throughout: the cursor wraps around SBUF many times,
    and the runs between two wraps are placed at once."""
    rows = [("sbuf", 0, len(elements) + 2, 4096, False)] * long_lived
    rows += [("sbuf", i, live, e, False) for i, e in enumerate(elements)]
    _assert_plain_walks_offsets(rows)


def _assert_plain_walks_offsets(rows) -> int:
    """The fast walk's offsets are the plain walk's; returns how many events it placed in runs."""
    spec = presets.TRN2.core
    placed_at_once = []
    original = allocation._Bump.place

    def counting(self, buffers, e, end, *args):
        placed_at_once.append(end - e)
        return original(self, buffers, e, end, *args)
    allocation._Bump.place = counting
    try:
        assert fast_offsets(table_program(rows), spec) == reference_offsets(table_program(rows), spec)
    finally:
        allocation._Bump.place = original
    return sum(placed_at_once)


def test_a_stream_of_small_tiles_is_placed_in_runs_between_wraps():
    # 2,000 tiles of 2 KiB per partition, two live at a time: SBUF (192 KiB) wraps about 20 times
    rows = [("sbuf", 0, 2010, 4096, False)] + [("sbuf", i, 2, 512, False) for i in range(2000)]
    assert _assert_plain_walks_offsets(rows) > 3000           # of 4,002 events


def test_an_overflow_inside_what_would_be_a_run_names_the_same_tiles_as_the_plain_walk():
    spec = presets.TRN2.core
    tile = spec.sbuf_partition_bytes // 4 // 4          # elements of a float32 tile of a quarter of SBUF
    # four quarters live together, then a fifth while they are: no room anywhere
    rows = [("sbuf", 0, 40, tile, False)] * 4 + [("sbuf", i, 1, 16, False) for i in range(1, 30)]
    rows += [("sbuf", 31, 2, tile, False)]
    expected = reference_offsets(table_program(rows), spec)
    assert expected[0] == "overflow"
    assert fast_offsets(table_program(rows), spec) == expected


def _stamped(kernel, *args):
    """The stamped program as allocated in program order (the list schedule would hand back a
    reordered copy whose live ranges are no longer the ones the allocator walked)."""
    nki._PROGRAMS.clear()
    schedule, nki.SCHEDULE = nki.SCHEDULE, "program"
    try:
        return nki.trace(kernel, *args, target="trn2")
    finally:
        nki.SCHEDULE = schedule
        nki._PROGRAMS.clear()


def test_the_stamper_notes_its_tiles_and_allocation_reads_the_same_rows_from_them():
    from trnlab.kernels import matmul_ladder
    args = (SD((256, 128 * 12), "bfloat16"), SD((256, 1024), "bfloat16"))
    noted = []
    original = allocation._stamped_notes

    def keeping(program, buffers):
        notes = original(program, buffers)
        noted.extend(notes)
        return notes
    allocation._stamped_notes = keeping
    try:
        program = _stamped(matmul_ladder.matmul_tiled, *args)
    finally:
        allocation._stamped_notes = original
    assert len(noted) == 1 and noted[0].end - noted[0].start > len(program.buffers) // 2
    assert "stamped_tiles" not in program.derived                     # used once, by the first allocation
    # the rows from the notes are the rows read from the buffer objects
    from_notes, from_objects = allocation._tile_rows(program.buffers, noted), allocation._tile_rows(program.buffers)
    assert from_notes[0] == from_objects[0]
    for kind in ("sbuf", "psum"):
        for a, b in zip(from_notes[1][kind], from_objects[1][kind]):
            assert a.tolist() == b.tolist()
    assert reference_offsets(program, presets.TRN2.core) == {b.id: b.offset for b in program.buffers
                                                            if b.on_chip and b.first >= 0}


@pytest.mark.parametrize("change", ["first", "memory", "length"])
def test_notes_that_do_not_match_the_table_are_ignored(change):
    from trnlab.kernels import matmul_ladder
    args = (SD((256, 128 * 12), "bfloat16"), SD((256, 1024), "bfloat16"))
    program = _stamped(matmul_ladder.matmul_tiled, *args)
    expected = {b.id: b.offset for b in program.buffers}
    rows = allocation._tile_rows(program.buffers)
    sbuf_ids = rows[1]["sbuf"][0].tolist()
    start, end = sbuf_ids[len(sbuf_ids) // 2], sbuf_ids[-1] + 1
    import numpy as np
    b = program.buffers
    note = allocation.StampedTiles(start, end, np.array([x.first for x in b[start:end]]),
                                   np.array([x.last for x in b[start:end]]),
                                   np.array([allocation._MEMORY_CODES.get(x.memory, 0) for x in b[start:end]]),
                                   np.array([x.partition_bytes if x.on_chip else 0 for x in b[start:end]]),
                                   np.array([bool(x.placement) for x in b[start:end]]))
    if change == "first":
        note.firsts[0] += 1
    elif change == "memory":
        note.memories[-1] = 0
    else:
        note = note._replace(end=len(b) + 1)
    allocation.note_stamped_tiles(program, note)
    assert allocation._stamped_notes(program, program.buffers) == []
    allocation.note_stamped_tiles(program, note)
    allocation.allocate(program)
    assert {x.id: x.offset for x in program.buffers} == expected
