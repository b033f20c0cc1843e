"""Allocation by liveness: the fast walk of `allocate.py` places every tile where the plain
next-fit walk (written out here, as `allocate` was before it was made fast) places it, and raises
the same errors. Random buffer tables (sizes, live ranges, PSUM banks, direct allocations) and
every kernel of the library."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

from trnlab.hardware import presets
from trnlab.hardware.allocate import allocate
from trnlab.hardware.allocation_modes import next_fit
from trnlab.hardware.errors import HardwareError
from trnlab.hardware.memory import first_fit
from trnlab.hardware.program import Buffer, Program


def reference_offsets(program: Program, spec) -> dict:
    """The plain walk: {buffer id: offset}, or the error it meets first: (kind, memory, instruction,
    the live tiles the message names)."""
    memories = {"sbuf": [spec.sbuf_partition_bytes, None], "psum": [spec.psum_partition_bytes, spec.psum_bank_bytes]}
    starts, ends = defaultdict(list), defaultdict(list)
    for b in program.buffers:
        if b.on_chip and b.first >= 0:
            starts[b.first].append(b)
            ends[b.last].append(b)
    fixed = {m: sorted((b for b in program.buffers if b.on_chip and b.first >= 0 and b.placement and b.memory == m),
                       key=lambda b: b.first) for m in memories}
    occupied = {m: [] for m in memories}
    owner = {m: [] for m in memories}
    cursor = {m: 0 for m in memories}
    offsets = {}
    placed = {}                               # live tiles in the order they were placed

    def failed(kind, b, k):
        live = sorted((t for t in placed.values() if t.memory == b.memory), key=lambda t: -t.partition_bytes)
        return (kind, b.memory, k, [(t.name, t.partition_bytes) for t in live])
    for k in sorted(set(starts) | set(ends)):
        for b in sorted(starts.get(k, ()), key=lambda b: not b.placement):
            capacity, bank = memories[b.memory]
            size = b.partition_bytes
            occ = occupied[b.memory]
            if b.placement:
                offset = b.placement["offset"]
                if offset < 0 or offset + size > capacity:
                    return failed("overflow", b, k)
                if any(o < offset + size and offset < o + n for o, n in occ):
                    return failed("overlap", b, k)
            else:
                firsts = [f.first for f in fixed[b.memory]]
                later = fixed[b.memory][bisect_right(firsts, k):bisect_right(firsts, b.last)]
                view = sorted(occ + [(f.placement["offset"], f.partition_bytes) for f in later]) if later else occ
                offset = first_fit(view, size, cursor[b.memory], capacity, bank)
                if offset is None and cursor[b.memory] > 0:
                    offset = first_fit(view, size, 0, capacity, bank)
                if offset is None:
                    return failed("overflow", b, k)
            i = bisect_left(occ, (offset, size))
            occ.insert(i, (offset, size))
            owner[b.memory].insert(i, b)
            cursor[b.memory] = offset + size
            offsets[b.id] = offset
            placed[b.id] = b
        for b in ends.get(k, ()):
            i = next(i for i, o in enumerate(owner[b.memory]) if o is b)
            del occupied[b.memory][i], owner[b.memory][i]
            del placed[b.id]
    return offsets


def fast_offsets(program: Program, spec):
    try:
        allocate(program, spec)
    except HardwareError as error:
        kind = "overlap" if "overlap" in type(error).__name__.lower() else "overflow"
        memory = "psum" if "PSUM" in type(error).__name__ or "(PSUM bytes" in str(error) else "sbuf"
        return (kind, memory, error.instruction, error.live)
    return {b.id: b.offset for b in program.buffers if b.on_chip and b.first >= 0}


buffer_rows = st.lists(st.tuples(st.sampled_from(["sbuf", "sbuf", "psum"]),
                                 st.integers(0, 40),                  # first use
                                 st.integers(0, 12),                  # live for
                                 st.sampled_from([0, 1, 4, 64, 256, 512, 1000, 2048, 4096]),  # free-axis elements
                                 st.booleans()),                      # a direct allocation
                       min_size=1, max_size=60)


def table_program(rows, direct_offset_kib: int = 0) -> Program:
    """A buffer table of float32 tiles [128 partitions, elements], one per (memory, first, live,
    elements, direct) row; direct rows placed at an offset derived from `direct_offset_kib`."""
    program = Program(name="random", target=presets.TRN2.core.name)
    for i, (memory, first, live, elements, direct) in enumerate(rows):
        placement = None
        if direct and memory == "psum":
            placement = {"offset": (direct_offset_kib % 8) * 2048, "kind": "psum"}
        elif direct:
            placement = {"offset": direct_offset_kib * 1024 * 12, "kind": "sbuf"}
        program.buffers.append(Buffer(id=i, name=f"t{i}", memory=memory, shape=(128, elements), dtype="float32",
                                      partition_axis=0, first=first, last=first + live, placement=placement))
    return program


@settings(max_examples=300, deadline=None)
@given(buffer_rows, st.integers(0, 15))
def test_fast_walk_places_every_tile_where_the_plain_next_fit_walk_does(rows, direct_offset_kib):
    spec = presets.TRN2.core
    program = table_program(rows, direct_offset_kib)
    expected = reference_offsets(program, spec)
    assert fast_offsets(program, spec) == expected


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9000), st.integers(0, 3000)), max_size=8),
       st.integers(0, 5000), st.integers(0, 9000), st.sampled_from([None, 2048]))
def test_next_fit_without_a_copy_answers_as_first_fit(ranges, nbytes, lowest, bank):
    occupied = sorted(ranges)
    assert next_fit(occupied, nbytes, lowest, 16384, bank) == first_fit(occupied, nbytes, lowest, 16384, bank)


def _library_cases():
    from test_trace_loops import _kernel_cases        # every kernel of trnlab.kernels, with shapes
    return _kernel_cases()


@pytest.mark.parametrize("name, kernel, args, kwargs", _library_cases(), ids=[c[0] for c in _library_cases()])
def test_every_library_kernel_gets_the_plain_walks_offsets(name, kernel, args, kwargs, monkeypatch):
    import trnlab.nki as nki
    monkeypatch.setattr(nki, "SCHEDULE", "program")   # the walk in program order (a list schedule keeps it)
    spec = presets.TRN2.core
    program = nki.trace(kernel, *args, target="trn2", **kwargs)
    placed = {b.id: b.offset for b in program.buffers if b.on_chip and b.first >= 0}
    assert placed and reference_offsets(program, spec) == placed
