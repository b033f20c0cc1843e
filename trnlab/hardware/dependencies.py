"""Dependencies: which earlier instructions an instruction must wait for (RAW / WAR / WAW on
overlapping memory), and the per-tensor records that answer it.

An instruction's data is ready at the latest of
- for every region it *reads*: the ready time of earlier writes to overlapping memory (RAW);
- for the region it *writes*: the ready time of earlier writes (WAW) and the end of earlier reads
  (WAR) of overlapping memory.
(Its engine's in-order queue, the shared ports and DMA channels come after: `engines.py`.) Two
regions overlap when the bounding boxes of their elements intersect on every axis of the same
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


def compact(records: list, merge=None):
    """Merge all but the newest KEEP records into one bounding record: `merge(old)` (default: the
    union of their boxes, the latest time — the first record reaching it — and that record's
    instruction; a merged write is not a matmul's)."""
    old = records[:-KEEP]
    records[:-KEEP] = [(merge or _latest_record)(old)]


def _latest_record(old: list) -> tuple:
    latest = max(old, key=lambda r: r[1])
    merged = (_union([r[0] for r in old]), latest[1], latest[2])
    return merged + (False,) if len(latest) == 4 else merged


def add_read(records: list, record, merge=None) -> None:
    """Note a read record (box, ...) of a tensor; compacted beyond MAX_RECORDS."""
    records.append(record)
    if len(records) > MAX_RECORDS:
        compact(records, merge)


def add_write(reads: list, writes: list, box, record, merge=None) -> None:
    """Note a write record of `box` (None: the whole tensor) of a tensor with these read and
    write records: the records it covers go (whatever overlaps them overlaps the new write, which
    ends later), then it is appended; compacted beyond MAX_RECORDS."""
    if box is None:
        reads.clear()
        writes.clear()
    else:
        if reads:
            reads[:] = [r for r in reads if not covers(box, r[0])]
        if writes:
            writes[:] = [r for r in writes if not covers(box, r[0])]
    add_read(writes, record, merge)


def read_waits(writes: list, box) -> list:
    """The write records a read of `box` waits for (RAW): those of overlapping boxes."""
    return [r for r in writes if r[0] is None or box is None or overlap(r[0], box)]


def write_waits(reads: list, writes: list, box, by_matmul: bool = False) -> tuple[list, list]:
    """(the records a write of `box` waits for: overlapping earlier writes (WAW), then reads (WAR);
    the matmul writes of the PSUM accumulation group a matmul (`by_matmul`) joins instead of
    waiting for). A write record's last field says whether a matmul wrote it."""
    waits, group = [], []
    for r in writes:
        if r[0] is None or box is None or overlap(r[0], box):
            (group if by_matmul and r[-1] else waits).append(r)
    waits.extend(r for r in reads if r[0] is None or box is None or overlap(r[0], box))
    return waits, group


def tracked(v) -> tuple:
    """(the tensor whose records a view's access is kept in, the box): a reshaped HBM alias
    (`HBM.alias`) shares its base's bytes, so its accesses are the base's — the whole base
    (box None: the two shapes' boxes do not compare), conservative like a merged record.
    Without this, a kernel reading another's output through a reshape (a compiled graph's
    views) would not wait for that output to be written."""
    tensor = v.tensor
    if tensor.alias_of is None:
        return tensor, v.box
    while tensor.alias_of is not None:
        tensor = tensor.alias_of
    return tensor, None


def wait_reads(views, t: float, waited: int):
    """Latest ready time of earlier writes overlapping any of `views` (RAW)."""
    for v in views:
        tensor, box = tracked(v)
        for r in read_waits(tensor._writes, box):
            if r[1] > t:
                t, waited = r[1], r[2]
    return t, waited


def wait_write(v, t: float, waited: int, by_matmul: bool = False):
    """Latest WAW / WAR constraint for writing view `v`; also the ready time of a PSUM
    accumulation group this matmul joins (0.0 if none)."""
    tensor, box = tracked(v)
    waits, group = write_waits(tensor._reads, tensor._writes, box, by_matmul)
    for r in waits:
        if r[1] > t:
            t, waited = r[1], r[2]
    group_ready = 0.0
    for r in group:
        if r[1] > group_ready:
            group_ready = r[1]
    return t, waited, group_ready


def record_reads(views, end: float, idx: int):
    for v in views:
        tensor, box = tracked(v)
        add_read(tensor._reads, (box, end, idx))


def record_write(v, ready: float, idx: int, by_matmul: bool = False):
    tensor, box = tracked(v)
    add_write(tensor._reads, tensor._writes, box, (box, ready, idx, by_matmul))
    tensor.version += 1
