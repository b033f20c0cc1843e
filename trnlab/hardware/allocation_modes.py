"""Where the allocator puts a tile among the free bytes of a memory: NKI's allocation modes.

How a tile's bytes are chosen is the program's `allocation_mode` (NKI's ``AllocationMode``, set by
``CompileConfig(allocation=Allocation.LINEAR, experimental_allocation_mode=...)``; the descriptions are
AWS's, nki.compiler.AllocationMode, 2026-11-13):

- ``"ring"`` (the default): next fit from a cursor that wraps — "give each tile a fresh address, and reuse
  freed memory only after the allocation wraps around": the most overlap of loads with compute, the most
  fragmented memory;
- ``"max_reuse"``: best fit — "always put a tile in the freed memory that fits it best" (the smallest gap
  that holds it, the lowest such gap on a tie): the least memory, and a tile allocated in a loop lands on
  the bytes the previous iteration's tile just freed, so its load waits for that tile's readers;
- ``"fast"``: "stack tiles whose lifetimes nest, and put every other tile in the freed memory that fits it
  best": a tile whose live range lies inside that of the live tile placed last goes directly above it
  (ASSUMED: which tile a nested one is stacked on is not published), every other tile best fit.

Each rule takes the live tiles `occupied` as [(offset, bytes per partition)] sorted by offset and answers an
offset or None (no room); `bank` is PSUM's bank size (a tile may not cross a bank boundary unless it is larger
than a bank, then it starts on one) or None.
"""
from __future__ import annotations

from bisect import bisect_left

MODES = ("ring", "fast", "max_reuse")     # Program.allocation_mode (NKI's AllocationMode, lower case)


def bank_start(start: int, nbytes: int, bank) -> int:
    """`start`, moved up to the next bank boundary if the tile would cross one (PSUM's bank rule)."""
    if bank is not None and (nbytes > bank or start // bank != (start + nbytes - 1) // bank):
        return -(-start // bank) * bank
    return start


def best_fit(occupied: list, nbytes: int, partition_bytes: int, bank) -> int | None:
    """The offset of the smallest gap between the live tiles `occupied` ([(offset, bytes)] by offset)
    that holds `nbytes` (the lowest such gap on a tie), or None: AllocationMode.MAX_REUSE's rule."""
    best, best_gap = None, None
    cursor = 0
    for offset, size in occupied + [(partition_bytes, 0)]:
        if offset > cursor:
            start = bank_start(cursor, nbytes, bank)
            gap = offset - cursor
            if start + nbytes <= offset and (best_gap is None or gap < best_gap):
                best, best_gap = start, gap
        if offset + size > cursor:
            cursor = offset + size
    return best


def stacked(occupied: list, top, nbytes: int, partition_bytes: int, bank) -> int | None:
    """Directly above the live tile `top` (offset, bytes) if those bytes are free, else None."""
    start = bank_start(top[0] + top[1], nbytes, bank)
    if start + nbytes > partition_bytes:
        return None
    i = bisect_left(occupied, (start, 0))
    if i > 0 and occupied[i - 1][0] + occupied[i - 1][1] > start:
        return None
    if i < len(occupied) and occupied[i][0] < start + nbytes:
        return None
    return start


def next_fit(occupied: list, nbytes: int, lowest: int, partition_bytes: int, bank) -> int | None:
    """AllocationMode.RING's rule: the first gap at or after `lowest` that holds `nbytes` (next fit from the
    cursor; `memory.first_fit` without copying `occupied`, the same answer: test_hardware_allocate_walk)."""
    cursor = lowest
    for offset, size in occupied:
        start = cursor if bank is None else bank_start(cursor, nbytes, bank)
        if start + nbytes <= offset:
            return start
        if offset + size > cursor:
            cursor = offset + size
    start = cursor if bank is None else bank_start(cursor, nbytes, bank)
    return start if start + nbytes <= partition_bytes else None
