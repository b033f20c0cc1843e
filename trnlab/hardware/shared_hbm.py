"""Shared HBM of a logical NeuronCore: the tensors both physical cores of an LNC=2 launch read and write.

On the chip the two physical cores of a logical core see one HBM: a kernel's outputs and its
`nl.shared_hbm` tensors are one buffer ("Shared HBM - Visible to all kernel instances in the SPMD
grid", nki.language.shared_hbm), which both cores write — disjoint parts, as AWS's page of
`nki.isa.core_barrier` describes — and read after a `core_barrier` ("both cores can perform the write
to data in HBM using nisa.dma_copy, and then signal to each other when the write operation is complete
using nisa.core_barrier"). `nl.private_hbm` (and `nl.hbm`, "MemoryRegion.private_hbm") stays per core.

`Device.spmd_launch` makes one HBM tensor per shared buffer of the launch (the n-th shared buffer of
each core's program) and a `SharedHBM` over them. What it keeps per core:

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
- **races** (full mode): two writes of one element that no barrier orders (the same barrier interval
  on both cores) have no defined order on the chip — which one lands last depends on DMA timing that
  trnlab does not claim to the element. If they store the same value (both cores zero-fill a whole
  output, as AWS's MoE kernels do before a barrier) the result is the same either way and trnlab says
  nothing; if the values differ, `SharedHBMRaceError` names the tensor, the element and the two cores
  (AWS's simulator runs programs one after another and gives silently the last one's value). Not
  examined: reads racing writes (a core reading what the other writes in the same interval gets what
  the rendezvous order gives), and writes made through a reshape (`HBM.alias`) of a shared tensor.
"""
from __future__ import annotations

import numpy as np

from .errors import HardwareError


class SharedHBMRaceError(HardwareError):
    """The two cores of a logical NeuronCore wrote different values to one element of a shared HBM
    tensor with no core_barrier between the writes [nki.isa.core_barrier: disjoint portions]."""
    rule = "shared HBM race"


class SharedHBM:
    """The shared HBM tensors of one launch over `cores` physical cores (lanes 0 .. cores - 1)."""

    def __init__(self, tensors: list, cores: int, full: bool):
        self.tensors = tensors
        self.records = [[([], []) for _ in tensors] for _ in range(cores)]   # lane -> tensor -> (reads, writes)
        self.epoch = [0] * cores              # barriers each lane has passed
        self.lane: int | None = None          # the lane running now
        # full mode: per tensor, which lane last wrote each element (-1: none) and in which interval
        self._owner = [np.full(t.shape, -1, np.int8) for t in tensors] if full else None
        self._when = [np.zeros(t.shape, np.int32) for t in tensors] if full else None
        self._index = {id(t): k for k, t in enumerate(tensors)}
        for t in tensors:
            t.lnc = self

    def enter(self, lane: int) -> None:
        """Lane `lane` runs: the tensors hold its dependency records."""
        for t, (reads, writes) in zip(self.tensors, self.records[lane]):
            t._reads, t._writes = reads, writes
        self.lane = lane

    def leave(self, lane: int) -> None:
        """Lane `lane` stops running (it waits, or its program ended): its records leave with it."""
        self.records[lane] = [(t._reads, t._writes) for t in self.tensors]
        self.lane = None

    def passed_barrier(self, lane: int) -> None:
        self.epoch[lane] += 1

    def release(self) -> None:
        for t in self.tensors:
            t.lnc = None

    def writing(self, view, values: np.ndarray) -> None:
        """Called by `View.write` before a shared tensor's elements change (full mode): refuse a write
        that races the other core's write of a different value; note who wrote."""
        lane, owner = self.lane, self._owner
        if lane is None or owner is None:
            return
        k = self._index[id(view.tensor)]
        index = () if view.index is None else view.index
        who, when = owner[k][index], self._when[k][index]
        epoch = self.epoch[lane]
        race = (who >= 0) & (who != lane) & (when >= epoch)
        if race.any():
            old = np.asarray(view.tensor._data[index]).reshape(race.shape)[race]
            new = np.asarray(values).reshape(race.shape)[race]
            differ = old.view(np.uint8).reshape(old.size, -1) != new.view(np.uint8).reshape(new.size, -1)
            if differ.any():
                first = np.argwhere(race)[int(np.argmax(differ.any(axis=1)))].tolist()
                peer = int(np.asarray(who).reshape(race.shape)[tuple(first)])
                raise SharedHBMRaceError(
                    f"shared HBM race: core {lane} writes {int(differ.any(axis=1).sum())} elements of "
                    f"{view.tensor.name!r}[{view._index_str()}] that core {peer} wrote with other values since "
                    f"their last core_barrier (first at view position {first}); which write lands last is not "
                    f"defined on the chip — write disjoint parts, or put nisa.core_barrier between the writes",
                    value=int(differ.any(axis=1).sum()), limit=0)
        owner[k][index] = lane
        self._when[k][index] = epoch


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
        hbm.enter(lane)
        if barrier:
            hbm.passed_barrier(lane)
