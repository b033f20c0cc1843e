"""Eager scheduling: in-order engine queues plus RAW / WAR / WAW dependencies on overlapping memory.

Each instruction is placed as it is issued. It starts at the latest of
- the time its engine (queue) is free — every engine runs its instructions in program order;
- for every region it *reads*: the ready time of earlier writes to overlapping memory (RAW);
- for the region it *writes*: the ready time of earlier writes (WAW) and the end of earlier reads
  (WAR) of overlapping memory.
Two regions overlap when the bounding boxes of their elements intersect on every axis of the same
tensor (conservative for gathers).

Exception (PSUM accumulation): a matmul writing a PSUM region that earlier matmuls wrote does not
wait for their results to drain — accumulation happens in PSUM, in issue order on the in-order
tensor engine — but the result is ready no earlier than theirs, so a reader waits for the whole
accumulation group.

Bookkeeping is per tensor and small: a write that covers earlier records replaces them (anything
that overlaps them overlaps the new write, which ends later), and when a tensor collects more than
`MAX_RECORDS` records all but the newest `KEEP` are merged into one bounding record (conservative: it can only
add waits, never remove one). So the cost per instruction is O(1) in the length of the program.
"""
from __future__ import annotations

MAX_RECORDS = 32
KEEP = 4


def overlap(a, b) -> bool:
    """Do two boxes (flat (lo0, hi0, lo1, hi1, ...) tuples; None = whole tensor) intersect?"""
    if a is None or b is None:
        return True
    for k in range(0, len(a), 2):
        if a[k] >= b[k + 1] or b[k] >= a[k + 1]:
            return False
    return True


def covers(a, b) -> bool:
    """Does box `a` contain box `b`?"""
    if a is None:
        return True
    if b is None:
        return False
    for k in range(0, len(a), 2):
        if b[k] < a[k] or b[k + 1] > a[k + 1]:
            return False
    return True


def _union(boxes):
    if any(b is None for b in boxes):
        return None
    lo_hi = list(boxes[0])
    for b in boxes:
        for k in range(0, len(lo_hi), 2):
            if b[k] < lo_hi[k]:
                lo_hi[k] = b[k]
            if b[k + 1] > lo_hi[k + 1]:
                lo_hi[k + 1] = b[k + 1]
    return tuple(lo_hi)


def compact(records: list):
    """Merge all but the newest KEEP records into one bounding record (latest time wins)."""
    old = records[:-KEEP]
    latest = max(old, key=lambda r: r[1])
    merged = (_union([r[0] for r in old]), latest[1], latest[2])
    if len(latest) == 4:
        merged = merged + (False,)
    records[:-KEEP] = [merged]


def wait_reads(views, t: float, waited: int):
    """Latest ready time of earlier writes overlapping any of `views` (RAW)."""
    for v in views:
        vb = v.box
        for box, ready, idx, _ in v.tensor._writes:
            if ready > t and (box is None or vb is None or overlap(box, vb)):
                t = ready
                waited = idx
    return t, waited


def wait_write(v, t: float, waited: int, by_matmul: bool = False):
    """Latest WAW / WAR constraint for writing view `v`; also the ready time of a PSUM
    accumulation group this matmul joins (0.0 if none)."""
    vb = v.box
    tensor = v.tensor
    group_ready = 0.0
    for box, ready, idx, mm in tensor._writes:
        if box is None or vb is None or overlap(box, vb):
            if by_matmul and mm:
                if ready > group_ready:
                    group_ready = ready
            elif ready > t:
                t = ready
                waited = idx
    for box, end, idx in tensor._reads:
        if end > t and (box is None or vb is None or overlap(box, vb)):
            t = end
            waited = idx
    return t, waited, group_ready


def record_reads(views, end: float, idx: int):
    for v in views:
        records = v.tensor._reads
        records.append((v.box, end, idx))
        if len(records) > MAX_RECORDS:
            compact(records)


def record_write(v, ready: float, idx: int, by_matmul: bool = False):
    tensor = v.tensor
    vb = v.box
    if vb is None:
        tensor._reads.clear()
        tensor._writes.clear()
    else:
        if tensor._reads:
            tensor._reads[:] = [r for r in tensor._reads if not covers(vb, r[0])]
        if tensor._writes:
            tensor._writes[:] = [r for r in tensor._writes if not covers(vb, r[0])]
    writes = tensor._writes
    writes.append((vb, ready, idx, by_matmul))
    if len(writes) > MAX_RECORDS:
        compact(writes)
    tensor.version += 1
