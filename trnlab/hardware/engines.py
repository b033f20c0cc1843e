"""The engines' timing model: when an instruction starts and ends, once its data is ready.

One implementation, called by all three drivers of the machine: the directly driven core
(`core.NeuronCore`), the compiled timing replay (`replay_timing.run_timing`) and the list schedule
(`list_schedule.list_order`). Each driver works out, in its own representation (views and their
records, or resolved dependency nodes), *when an instruction's data is ready and which earlier
instruction decided that* (the RAW / WAR / WAW rules of `dependencies.py`); everything after that is
a step of `EngineTimes`:

- `compute`: a Vector / Scalar / GpSimd instruction — its engine's in-order queue, the Vector
  engine's static overhead hidden back to back, the shared SBUF / PSUM ports [ARCH-v2], [ARCH-v3-PAR];
- `tensor`: a Tensor-engine instruction — LoadStationary of a new stationary tile in the
  background, then the array busy for its columns, the result after the drain;
- `dma`: a DMA — the queue (named, or the one free first), its fixed latency, and its passage
  through the core's shared DMA engines and the HBM channel (`Channel`, earliest free slot);
- `queue`: an instruction that only waits for its engine (set_rng_seed).

Every step returns the instruction's start and the index of the instruction that decided it
("waited", -1 when its own queue did) — what the timeline records and `explain.py` explains.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heapify, heapreplace

from .cost import issue_busy_ns

PE, ACT, DVE, POOL = 0, 1, 2, 3
FIRST_DMA = 4          # engine ids: PE, ACT, DVE, POOL, then one per DMA queue
_TOUCH = 1e-6          # ns: intervals closer than this are merged (float rounding)
PRUNE_ABOVE = 64       # a channel with more intervals than this is pruned at the next transfer


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


class Port:
    """A shared memory port: its busy intervals (start, end, instruction), sorted. An instruction
    takes the earliest gap long enough at or after it is ready (hardware arbitration, not issue
    order); intervals that ended long ago are dropped."""

    __slots__ = ("busy",)

    def __init__(self):
        self.busy: list = []

    @staticmethod
    def slot(ports, ready: float, duration: float, waited: int) -> tuple[float, int]:
        """(start, waited_for): the earliest time >= ready at which every port is free for
        `duration` ns, and the instruction whose use of a port delayed it (or `waited`)."""
        t = ready
        moved = True
        while moved:
            moved = False
            for port in ports:
                for s, e, i in port.busy:
                    if e <= t:
                        continue
                    if s >= t + duration:
                        break
                    t, waited, moved = e, i, True
        return t, waited

    def book(self, start: float, end: float, idx: int):
        busy = self.busy
        busy.append((start, end, idx))
        if len(busy) > 1 and busy[-2][0] > start:
            busy.sort()
        if len(busy) > 128:
            del busy[:64]                   # instructions far in the past no longer compete


def port_needs(spec, eid: int, sbuf: int, psum: int) -> tuple[bool, str | None]:
    """Which shared memory ports an instruction of engine `eid` touching `sbuf` / `psum` bytes
    waits for: (the SBUF port?, None | "core" | "bank" for PSUM) [ARCH-v2], [ARCH-v3-PAR] —
    on NeuronCore-v2 Vector and GpSimd share SBUF's and Vector and Scalar PSUM's; from v3 on only
    Vector and Scalar on the same PSUM bank collide."""
    sbuf_port = bool(sbuf and eid != ACT and spec.sbuf_port_shared)      # DVE and POOL (v2)
    psum_port = spec.psum_port if psum and eid != POOL and spec.psum_port in ("core", "bank") else None
    return sbuf_port, psum_port


def psum_banks(bank_bytes: int, byte_ranges) -> list[int]:
    """The PSUM banks (sorted) that [lo, hi) byte ranges within a partition touch."""
    banks = set()
    for lo, hi in byte_ranges:
        banks.update(range(lo // bank_bytes, (hi - 1) // bank_bytes + 1))
    return sorted(banks)


def port_keys(sbuf_port: bool, psum_port, bank_bytes: int, psum_ranges=()) -> tuple:
    """The keys of the ports an instruction needs ("sbuf", "psum", ("psum", bank)): `psum_port` as
    `port_needs` gives it, `psum_ranges` the [lo, hi) bytes it touches in PSUM (for "bank")."""
    keys = ("sbuf",) if sbuf_port else ()
    if psum_port == "core":
        keys += ("psum",)
    elif psum_port:
        keys += tuple(("psum", b) for b in psum_banks(bank_bytes, psum_ranges))
    return keys


def first_free_queue(queue_free) -> int:
    """The DMA queue free first (the lowest-numbered of those free first): a transfer with no
    queue given starts there, as the runtime's DMA rings do. (`EngineTimes` keeps the queues in a
    heap of (free time, queue) whose top is this answer.)"""
    return queue_free.index(min(queue_free))


class EngineTimes:
    """The timing state of one core's engines and the steps that advance it (module docstring).

    `free[e]`: when engine e (PE, ACT, DVE, POOL, then the DMA queues) is free; `dma_engines`,
    `hbm_channel`: the
    core's shared DMA engines and its HBM channel (shared by a device's cores); `ports`: the
    shared memory ports by key; `load_end`, `last_matmul_start`: the Tensor engine's last
    LoadStationary and matmul; `vector_follows`: the Vector engine has issued in this launch."""

    __slots__ = ("spec", "free", "dma_engines", "hbm_channel", "bandwidth", "dma_latency", "ports", "load_end",
                 "last_matmul_start", "vector_follows", "queue_heap", "pe_blocks", "pe_seen", "dma_issue",
                 "issuer", "pipelined")

    def __init__(self, spec, n_engines: int, hbm: Channel | None = None, bandwidth: float | None = None):
        self.spec = spec
        self.free = [0.0] * n_engines
        self.dma_engines = Channel()
        self.hbm_channel = hbm or Channel()
        self.bandwidth = bandwidth or spec.hbm_bandwidth
        self.dma_latency = spec.dma_latency_ns
        self.dma_issue = spec.dma_issue_ns      # ns per transfer on the core's one issuer (0: none)
        self.issuer = Channel()          # the time the issuer is busy issuing transfers
        self.pipelined = spec.dma_queue_pipelined   # a queue overlaps a transfer's fixed latency (False: none)
        self.ports: dict = {}
        self.load_end = 0.0
        self.last_matmul_start = 0.0
        self.vector_follows = False
        self.queue_heap: list = []
        self._heap_queues()
        self.pe_blocks = [0.0] * 16      # tiling mode: when each 32 x 32 block of the PE array is free
        self.pe_seen = 0.0               # free[PE] when the blocks were last brought up to date

    def _heap_queues(self) -> None:
        """The DMA queues as a heap of (free time, queue): its top is `first_free_queue`'s answer.
        (`free` changes only through the steps below and `barrier`, which keep it.)"""
        heap = self.queue_heap
        heap[:] = [(f, q) for q, f in enumerate(self.free[FIRST_DMA:])]      # (in place: kept by callers)
        heapify(heap)

    def port(self, key) -> Port:
        port = self.ports.get(key)
        if port is None:
            port = self.ports[key] = Port()
        return port

    def queue(self, eid: int, ready: float, waited: int, duration: float) -> tuple[float, float, int]:
        """(start, end, waited) of an instruction that waits only for its data and its engine's
        in-order queue (the queue wins a tie)."""
        free = self.free
        if free[eid] >= ready:
            ready, waited = free[eid], -1
        end = ready + duration
        free[eid] = end
        return ready, end, waited

    def compute(self, eid: int, ready: float, waited: int, duration: float, hidden: float,
                ports: tuple, idx: int) -> tuple[float, float, int]:
        """(start, end, waited) of Vector / Scalar / GpSimd instruction `idx` whose data is ready
        at `ready`: after its queue; a Vector instruction issued back to back overlaps its
        predecessor by `hidden` ns [ARCH-v2]; then the earliest slot in which every shared port
        it needs (`ports`, keys) is free for it [ARCH-v2], [ARCH-v3-PAR]."""
        free = self.free
        engine_free = free[eid]
        if engine_free >= ready:
            ready, waited = engine_free, -1
        if eid == DVE:
            if hidden:
                duration = issue_busy_ns(duration, hidden, ready, engine_free, self.vector_follows)
            self.vector_follows = True
        if ports:
            objs = [self.port(p) for p in ports]
            ready, waited = Port.slot(objs, ready, duration, waited)
            for p in objs:
                p.book(ready, ready + duration, idx)
        end = ready + duration
        free[eid] = end
        return ready, end, waited

    def tensor(self, ready: float, waited: int, new: bool, st_ready: float, st_waited: int,
               load_ns: float, dst_ready: float, dst_waited: int, group_ready: float, busy: float,
               latency: float, tiles: int = 0) -> tuple[float, float, float, int]:
        """(start, end, ready, waited) of a Tensor-engine instruction whose moving data is ready at
        `ready`: after the PE queue; with a `new` stationary tile (ready at `st_ready`),
        LoadStationary starts once the tile is ready and the previous matmul has taken its weights
        out of the shadow buffer, and the instruction starts no earlier than the load's end (with
        the tile already loaded, no earlier than that load's end); then after the earlier accesses
        its result's region waits for (WAR / WAW: `dst_ready`). The array is busy `busy` ns; the
        result is in PSUM `latency` ns after the start, and no earlier than the accumulation group
        it joins (`group_ready`). `tiles`: a matmul in tiling mode, the bit mask of the 32 x 32 PE
        blocks it occupies (`tensor_tiled`); 0 for the whole array."""
        if tiles:
            return self.tensor_tiled(ready, waited, new, st_ready, st_waited, load_ns, dst_ready, dst_waited,
                                     group_ready, busy, latency, tiles)
        free = self.free
        if free[PE] >= ready:
            ready, waited = free[PE], -1
        ready, end, result, waited = self._matmul_start(ready, waited, new, st_ready, st_waited, load_ns,
                                                        dst_ready, dst_waited, group_ready, busy, latency)
        free[PE] = end
        return ready, end, result, waited

    def _matmul_start(self, ready: float, waited: int, new: bool, st_ready: float, st_waited: int,
                      load_ns: float, dst_ready: float, dst_waited: int, group_ready: float, busy: float,
                      latency: float) -> tuple[float, float, float, int]:
        """The part of `tensor` / `tensor_tiled` after the array (or its blocks) is free: LoadStationary
        of a `new` tile, then the result region's WAR / WAW wait; (start, end, result ready, waited)."""
        if new:
            load_start = st_ready if st_ready > self.last_matmul_start else self.last_matmul_start
            load_end = self.load_end = load_start + load_ns
            if load_end > ready:
                ready, waited = load_end, st_waited
        elif self.load_end > ready:
            ready = self.load_end
        if dst_ready > ready:
            ready, waited = dst_ready, dst_waited
        result = ready + latency
        if group_ready > result:
            result = group_ready
        self.last_matmul_start = ready
        return ready, ready + busy, result, waited

    def tensor_tiled(self, ready: float, waited: int, new: bool, st_ready: float, st_waited: int,
                     load_ns: float, dst_ready: float, dst_waited: int, group_ready: float, busy: float,
                     latency: float, tiles: int) -> tuple[float, float, float, int]:
        """`tensor` for a matmul in tiling mode (nki.isa.nc_matmul, "Tiling mode": several matmuls
        with a stationary smaller than 128 x 128 "run in parallel" on row / column tiles of the PE
        array). The queue still issues in order — an instruction starts no earlier than the one
        before it started — but it waits only for the 32 x 32 blocks it occupies (bit b of `tiles`:
        row block b // 4, column block b % 4), not for the whole array. LoadStationary is
        unchanged (one load at a time). A whole-array instruction waits for every block (`free[PE]`
        is the latest block's end). ASSUMED: AWS publishes no timing for tiling mode beyond
        "in parallel"."""
        free = self.free
        blocks = self.pe_blocks
        if self.pe_seen != free[PE]:          # a whole-array instruction ran since: all blocks until then
            blocks[:] = [free[PE]] * 16
        if self.last_matmul_start > ready:
            ready, waited = self.last_matmul_start, -1
        for b in range(16):
            if tiles >> b & 1 and blocks[b] > ready:
                ready, waited = blocks[b], -1
        ready, end, result, waited = self._matmul_start(ready, waited, new, st_ready, st_waited, load_ns,
                                                        dst_ready, dst_waited, group_ready, busy, latency)
        for b in range(16):
            if tiles >> b & 1:
                blocks[b] = end
        if end > free[PE]:
            free[PE] = end
        self.pe_seen = free[PE]
        return ready, end, result, waited

    def dma(self, queue: int | None, ready: float, waited: int, fixed_ns: float, cycles: float,
            engine_ns: float, hbm_bytes: int) -> tuple[int, float, float, int]:
        """(engine id, start, end, waited) of a DMA whose data is ready at `ready` (decided by
        `waited`) on DMA queue `queue` (None: the queue free first, `first_free_queue`).

        It starts when both are (the queue wins a tie). Its engines begin `fixed_ns` later and it
        ends `cycles` (ns) after that — but no earlier than its share of the core's DMA engines
        (`engine_ns`) and, if it moves `hbm_bytes` > 0 through HBM, of the HBM channel (at
        `bandwidth` bytes/s) have passed, each in its channel's earliest free slot at or after the
        engines begin. Then the channels forget what ended before the earliest a later transfer
        can begin (the first queue free + the fixed latency). With `spec.dma_issue_ns` > 0 every
        transfer of the core also needs that long on one shared issuer (its descriptors generated
        by the engine that issues it), in the issuer's earliest free slot at or after it is ready;
        it starts there (a throughput limit on many tiny transfers; each one's latency unchanged).
        With `spec.dma_queue_pipelined` a queue takes its next transfer at once: the transfer starts
        when its data is ready and its engines begin after its fixed latency, but no earlier than the
        queue's previous transfer ends (in order on the queue, the fixed latency overlapped)."""
        heap = self.queue_heap
        first, q = heap[0]
        if queue is not None:
            q = queue
        eid = q + 4                                   # FIRST_DMA (a literal: this runs per transfer)
        free = self.free
        queue_free = free[eid]
        pipelined = self.pipelined
        if queue_free >= ready and not pipelined:
            ready, waited = queue_free, -1
        issue = self.dma_issue
        if issue:                        # the issuer: `issue` ns per transfer, its earliest free slot
            slot = self.issuer.reserve(ready, issue)
            if slot > ready:
                ready, waited = slot, -1
            if len(self.issuer.ends) > PRUNE_ABOVE:
                self.issuer.prune(first)
        begin = ready + fixed_ns
        if pipelined and queue_free > begin:
            begin = queue_free           # in order behind the queue's last transfer; its fixed latency overlapped
        end = begin + cycles
        dma, hbm = self.dma_engines, self.hbm_channel
        engines_end = dma.reserve(begin, engine_ns) + engine_ns
        if engines_end > end:
            end = engines_end
        if hbm_bytes:
            hbm_ns = hbm_bytes * 1e9 / self.bandwidth
            hbm_end = hbm.reserve(begin, hbm_ns) + hbm_ns
            if hbm_end > end:
                end = hbm_end
        if len(hbm.ends) > PRUNE_ABOVE or len(dma.ends) > PRUNE_ABOVE:
            horizon = first + self.dma_latency
            hbm.prune(horizon)
            dma.prune(horizon)
        free[eid] = end
        if queue is None:
            heapreplace(heap, (end, q))
        else:
            self._heap_queues()
        return eid, ready, end, waited

    def barrier(self, now: float) -> None:
        """Every engine waits until `now`; the next launch starts a new instruction stream."""
        self.free[:] = [max(now, f) for f in self.free]
        self.vector_follows = False
        self._heap_queues()
