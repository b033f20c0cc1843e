"""Shared HBM of a logical NeuronCore: the tensors both physical cores of an LNC=2 launch read and write.

On the chip the two physical cores of a logical core see one HBM: a kernel's outputs and its
`nl.shared_hbm` tensors are one buffer ("Shared HBM - Visible to all kernel instances in the SPMD
grid", nki.language.shared_hbm), which both cores write — disjoint parts, as AWS's page of
`nki.isa.core_barrier` describes — and read after a `core_barrier` ("both cores can perform the write
to data in HBM using nisa.dma_copy, and then signal to each other when the write operation is complete
using nisa.core_barrier"). `nl.private_hbm` (and `nl.hbm`, "MemoryRegion.private_hbm") stays per core.
[awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.core_barrier.html;
 .../v2.32.0/nki/api/generated/nki.language.shared_hbm.html; .../v2.29.0/nki/api/generated/nki.language.hbm.html]

`Device.spmd_launch` makes one HBM tensor per shared buffer of the launch (the n-th shared buffer of
each core's program: `device._shared_buffers`) and a `SharedHBM` over them. What it keeps per core:

- **dependency records**: the scheduler's RAW / WAR / WAW records of a tensor (`dependencies.py`) are
  the core's own — a core waits for its own earlier accesses, never silently for the other core's;
  what orders the two cores is the barrier (it waits for the peer core to arrive, and counts as a
  write of its `data`, so this core's later accesses to `data` wait for it). The cores of a launch run
  one at a time under the rendezvous (`Device.run_spmd`), so the tensors hold the running core's
  records: `enter` puts them in, `leave` takes them out, at every point where the running core may
  change (`meet`, around the fabric's rendezvous).
- **values** (full mode): one array and one written-mask per tensor, so a row the other core wrote is
  there and counts as written (`UninitializedReadError` only for what no core wrote). The values
  follow the order in which the rendezvous issues the cores' instructions: a core runs until it waits
  at a core_barrier (or sendrecv), so whatever a core wrote before a barrier is in place before the
  other core's instructions after it — the order a barrier gives on the chip.
- **writes no barrier orders** (full mode): two writes of one element by the two cores in the same
  barrier interval have no order but time on the chip. trnlab's rule: **the write that ends later in
  simulated time wins** (a tie keeps the later-issued one). AWS's MoE kernels rely on it: both cores
  zero-fill the whole output at the start, then each accumulates its blocks into it long after the
  other's zero-fill ended, with no barrier in between. A core's writes are noted as it issues them;
  when it stops running (`leave`) each gets its end time from the core's timeline, and where the other
  core's earlier-issued write of an element ends later, that element gets the other core's value back.
  Reads are not reordered: a core reading an element the other core writes in the same interval reads
  what the rendezvous order gives (a race on the chip; not examined), and a write through a reshape of
  a shared tensor (`HBM.alias`) is not timed (the rendezvous order decides). A launch whose cores write
  provably disjoint parts of every shared tensor (`disjoint_writes`: the boxes of their programs' writes
  do not meet) needs none of this, and keeps the fast path; any other runs on the reference path in
  full mode.
"""
from __future__ import annotations

import numpy as np

from .tensor import PrototypeMemory, Tensor, View
from .dependencies import overlap


class SharedHBM:
    """The shared HBM tensors of one launch over `cores` physical cores (lanes 0 .. cores - 1).
    `timed`: full mode, and the cores may write the same elements (then their writes are timed)."""

    def __init__(self, tensors: list, cores: int, timed: bool):
        self.tensors = tensors
        self.records = [[([], []) for _ in tensors] for _ in range(cores)]   # lane -> tensor -> (reads, writes)
        self.epoch = [0] * cores              # barriers each lane has passed
        self.cores = [None] * cores           # each lane's NeuronCore, once it ran
        self.lane: int | None = None          # the lane running now
        self.timed = timed
        # timed: per tensor, which lane last wrote each element (-1: none), in which interval, ending when
        self._owner = [np.full(t.shape, -1, np.int8) for t in tensors] if timed else None
        self._when = [np.zeros(t.shape, np.int32) for t in tensors] if timed else None
        self._end = [np.zeros(t.shape, np.float64) for t in tensors] if timed else None
        self._index = {id(t): k for k, t in enumerate(tensors)}
        self._issued: list = []               # the running lane's writes: (tensor, index, record)
        self._crossed: list = []              # ... that covered the other lane's writes of this interval
        for t in tensors:
            t.lnc = self

    def enter(self, lane: int, core) -> None:
        """Lane `lane` runs on `core`: the tensors hold its dependency records."""
        for t, (reads, writes) in zip(self.tensors, self.records[lane]):
            t._reads, t._writes = reads, writes
        self.cores[lane] = core
        self.lane = lane

    def leave(self, lane: int) -> None:
        """Lane `lane` stops running (it waits, or its program ended): its writes since `enter` get their
        times (the later write of an element wins), its records leave with it."""
        if self._issued:
            self._settle(self.cores[lane]._records)
        self.records[lane] = [(t._reads, t._writes) for t in self.tensors]
        self.lane = None

    def passed_barrier(self, lane: int) -> None:
        self.epoch[lane] += 1

    def release(self) -> None:
        for t in self.tensors:
            t.lnc = None

    def writing(self, view: View, values) -> None:
        """Called by `View.write` before a shared tensor's elements change: note the write (and the other
        lane's writes of this interval it covers, with their values) for `leave`."""
        lane = self.lane
        if not self.timed or lane is None:
            return
        k = self._index[id(view.tensor)]
        index = () if view.index is None else view.index
        record = len(self.cores[lane]._records)       # the record this instruction appends next
        who = self._owner[k][index]
        crossed = (who >= 0) & (who != lane) & (self._when[k][index] >= self.epoch[lane])
        if crossed.any():
            old = np.asarray(view.tensor._data[index])
            self._crossed.append((k, index, crossed, old[crossed], self._end[k][index][crossed], who[crossed]))
        self._owner[k][index] = lane
        self._when[k][index] = self.epoch[lane]
        self._issued.append((k, index, record))

    def _settle(self, records: list) -> None:
        for k, index, record in self._issued:          # in issue order: a core's later write ends later
            self._end[k][index] = records[record][3]
        for k, index, crossed, old, old_end, old_owner in self._crossed:
            end = np.asarray(self._end[k][index])
            back = np.zeros(crossed.shape, bool)
            back[crossed] = old_end > end[crossed]     # the other lane's write ends later: its value stays
            if not back.any():
                continue
            t = self.tensors[k]
            keep = old_end > end[crossed]
            for array, value in ((t._data, old[keep]), (self._end[k], old_end[keep]),
                                 (self._owner[k], old_owner[keep])):
                region = np.array(array[index])
                region[back] = value
                array[index] = region
        self._issued, self._crossed = [], []


def disjoint_writes(programs: list, columns: list) -> bool:
    """Do the programs (one per lane) write provably disjoint parts of every shared buffer? `columns[i]`:
    program i's shared buffer ids, the n-th of each one tensor. A write through a reshape counts as the
    whole tensor; boxes are bounding boxes (`View.box`), so "no" may be conservative."""
    per_lane = []
    for program, column in zip(programs, columns):
        position = {bid: n for n, bid in enumerate(column)}
        buffers = program.buffers
        protos: dict = {}
        boxes: dict = {}
        for ins in program.instructions:
            for access in ins.writes():
                bid = access.buffer
                whole = False
                while buffers[bid].alias_of is not None:
                    bid, whole = buffers[bid].alias_of, True
                n = position.get(bid)
                if n is None:
                    continue
                if whole or access.index is None:
                    box = None
                else:
                    proto = protos.get(bid)
                    if proto is None:
                        b = buffers[bid]
                        proto = protos[bid] = Tensor(PrototypeMemory("hbm"), b.shape, b.dtype, b.name, None, 0, False)
                    box = View(proto, access.index).box
                boxes.setdefault(n, []).append(box)
        per_lane.append(boxes)
    for a in range(len(per_lane)):
        for b in range(a + 1, len(per_lane)):
            for n, mine in per_lane[a].items():
                theirs = per_lane[b].get(n, ())
                if len(mine) * len(theirs) > 1_000_000:
                    return False                        # too many to compare: time them
                if any(overlap(x, y) for x in mine for y in theirs):
                    return False
    return True


def meet(core, fabric, request, barrier: bool = False):
    """`fabric.collective(request)` for `core`, which may hand the run to the other core of its launch
    while it waits: its shared-tensor records leave with it and come back; a barrier passed starts a
    new interval of its writes."""
    shared = core.__dict__.get("_shared_hbm")
    if shared is None:
        return fabric.collective(request)
    hbm, lane = shared
    hbm.leave(lane)
    try:
        return fabric.collective(request)
    finally:
        hbm.enter(lane, core)
        if barrier:
            hbm.passed_barrier(lane)
