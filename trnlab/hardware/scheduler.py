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

from bisect import bisect_left, bisect_right

MAX_RECORDS = 32
KEEP = 4
_TOUCH = 1e-6          # ns: intervals closer than this are merged (float rounding)


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


def wait_reads(views, t: float, waited: int):
    """Latest ready time of earlier writes overlapping any of `views` (RAW)."""
    for v in views:
        for r in read_waits(v.tensor._writes, v.box):
            if r[1] > t:
                t, waited = r[1], r[2]
    return t, waited


def wait_write(v, t: float, waited: int, by_matmul: bool = False):
    """Latest WAW / WAR constraint for writing view `v`; also the ready time of a PSUM
    accumulation group this matmul joins (0.0 if none)."""
    waits, group = write_waits(v.tensor._reads, v.tensor._writes, v.box, by_matmul)
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
        add_read(v.tensor._reads, (v.box, end, idx))


def record_write(v, ready: float, idx: int, by_matmul: bool = False):
    tensor = v.tensor
    add_write(tensor._reads, tensor._writes, v.box, (v.box, ready, idx, by_matmul))
    tensor.version += 1


class Channel:
    """A shared resource that passes one transfer at a time (the HBM channel, the DMA engines).

    It keeps its busy intervals, sorted and merged; a transfer takes the earliest free gap long
    enough for it at or after its ready time — so a transfer that is ready early is not held back
    by one issued before it that must wait (e.g. a store waiting for its matmuls). Intervals that
    end before any future transfer can start are pruned (`prune`), so the cost per transfer stays
    small: a bisect plus a scan over the few gaps after the ready time.
    """

    __slots__ = ("starts", "ends")

    def __init__(self):
        self.starts: list[float] = []
        self.ends: list[float] = []

    def reserve(self, ready: float, duration: float) -> float:
        """Book `duration` ns in the earliest gap at or after `ready`; returns the start."""
        starts, ends = self.starts, self.ends
        if ends:                                # the usual cases of a busy channel, without a search:
            last_end = ends[-1]
            if ready >= last_end:               # after every interval
                end = ready + duration
                if last_end >= ready - _TOUCH:
                    ends[-1] = end
                else:
                    starts.append(ready)
                    ends.append(end)
                return ready
            if ready > starts[-1]:              # inside the last one: right after it
                ends[-1] = last_end + duration
                return last_end
        i = bisect_right(ends, ready)           # first interval that ends after `ready`
        t = ready
        n = len(ends)
        while i < n and starts[i] < t + duration:
            t = ends[i]                         # does not fit before it: try after it (the ends
            i += 1                              # only grow: the intervals are sorted, disjoint)
        end = t + duration
        if i and ends[i - 1] >= t - _TOUCH:     # touches the interval before it
            if i < n and starts[i] <= end + _TOUCH:
                ends[i - 1] = ends[i]           # fills a gap exactly: merge three into one
                del starts[i], ends[i]
            else:
                ends[i - 1] = end
        elif i < n and starts[i] <= end + _TOUCH:
            starts[i] = t
        else:
            starts.insert(i, t)
            ends.insert(i, end)
        return t

    def prune(self, before: float):
        """Forget intervals that end before `before` (no future transfer can start earlier)."""
        k = bisect_left(self.ends, before)
        if k > 32:
            del self.starts[:k], self.ends[:k]

    @property
    def busy_until(self) -> float:
        return self.ends[-1] if self.ends else 0.0


def psum_banks(bank_bytes: int, byte_ranges) -> list[int]:
    """The PSUM banks (sorted) that [lo, hi) byte ranges within a partition touch."""
    banks = set()
    for lo, hi in byte_ranges:
        banks.update(range(lo // bank_bytes, (hi - 1) // bank_bytes + 1))
    return sorted(banks)


# -- the engines' timing rules: one implementation, used by the core (checked path) and by the
# compiled replay (compiled.run_timing). Each takes the running (time, waited-for) pair that the
# dependencies gave and returns it moved on; "waited-for" names the instruction that decided.
PRUNE_ABOVE = 64       # a channel with more intervals than this is pruned at the next transfer


def first_free_queue(queue_free) -> int:
    """The DMA queue free first (the lowest-numbered of those free first): a transfer with no
    queue given starts there, as the runtime's DMA rings do."""
    return queue_free.index(min(queue_free))


def dma_transfer(ready: float, waited: int, queue_free: float, fixed_ns: float, cycles: float,
                 engine_ns: float, hbm_bytes: int, bandwidth: float, dma: "Channel", hbm: "Channel",
                 horizon: float) -> tuple[float, float, int]:
    """(start, end, waited) of a DMA whose data is ready at `ready` (decided by `waited`) on a queue
    free at `queue_free`.

    It starts when both are (the queue wins a tie). Its engines begin `fixed_ns` later and it ends
    `cycles` (ns) after that — but no earlier than its share of the core's DMA engines
    (`engine_ns`) and, if it moves `hbm_bytes` > 0 through HBM, of the HBM channel (at `bandwidth`
    bytes/s) have passed, each in its channel's earliest free slot at or after the engines begin.
    Then the channels forget what ended before `horizon` (the earliest a later transfer can
    begin: the first queue free + the fixed latency)."""
    if queue_free >= ready:
        ready, waited = queue_free, -1
    begin = ready + fixed_ns
    end = begin + cycles
    engines_end = dma.reserve(begin, engine_ns) + engine_ns
    if engines_end > end:
        end = engines_end
    if hbm_bytes:
        hbm_ns = hbm_bytes * 1e9 / bandwidth
        hbm_end = hbm.reserve(begin, hbm_ns) + hbm_ns
        if hbm_end > end:
            end = hbm_end
    if len(hbm.ends) > PRUNE_ABOVE or len(dma.ends) > PRUNE_ABOVE:
        hbm.prune(horizon)
        dma.prune(horizon)
    return ready, end, waited


def stationary_load(start: float, waited: int, st_ready: float, st_waited: int,
                    last_matmul_start: float, load_ns: float) -> tuple[float, int, float]:
    """A Tensor-engine instruction with a new stationary tile: LoadStationary starts once the tile
    is ready and the previous matmul has taken its weights out of the shadow buffer, and the
    instruction starts no earlier than the load's end. Returns (start, waited, load_end)."""
    load_start = st_ready if st_ready > last_matmul_start else last_matmul_start
    load_end = load_start + load_ns
    if load_end > start:
        return load_end, st_waited, load_end
    return start, waited, load_end
