"""A device: one Trainium chip — N NeuronCores sharing the chip's HBM — that runs programs.

    device = Device("trn2")                   # 8 cores (trn1: 2), one HBM, one timeline per core
    run = device.run(program, a, b, core=3)   # replay a traced program on core 3
    run.outputs, run.latency_ns, run.profile(), device.chrome_trace("trace.json")

The cores share the chip's HBM (capacity: `ChipSpec.hbm_bytes`) and its bandwidth: every DMA that
touches HBM, from any core, passes one channel at the chip's rate (`ChipSpec.hbm_bandwidth`), so two
cores streaming at once slow each other down once they need more than the chip has, while one core
alone may use more than its even share. Each core keeps its own engines, DMA queues, SBUF and PSUM.
``Device("trn2", cores=1)`` (what `nki.run` uses) is one core with its share of the chip: 1/8 of the
HBM bytes and bandwidth, the figures `CoreSpec` quotes.

Launches on one core run one after another (each starts when the previous one's last result is
ready, as the runtime launches NEFFs on a core in order); launches on different cores overlap.
`run_spmd` launches one program per core at once (an NKI launch grid spread over cores with
`nl.spmd_dim`): they share one copy of the arguments in HBM and the chip's HBM bandwidth, and one
tensor per `nl.shared_hbm` buffer (the outputs, a kernel's internal shared tensors), which every core
reads and writes, ordered by their `core_barrier`s (`shared_hbm.py`). Every launch is a region of its core's
timeline, so per-launch and per-op profiles come from the
same records. Tensors made with `device.tensor(...)` live in the device's HBM and can be passed to
`run` without a copy; a tensor of another device is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .core import NeuronCore
from .engines import Channel
from .memory import HBM
from .presets import CHIPS, ChipSpec, CoreSpec
from .profile import Profile
from .program import Program
from .replay import execute, read_outputs
from .shared_hbm import SharedHBM, disjoint_writes
from .tensor import Tensor
from .timeline import Timeline, write_chrome_trace


_RENDEZVOUS: list = []     # what the distributed layer lends (at most one), found once


def _rendezvous():
    """The function that runs an SPMD launch's cores together, so that their sendrecv / core_barrier
    meet: `trnlab.distributed` lends it through the package's entry point (pyproject.toml, group
    "trnlab.spmd_rendezvous"), as training lends the compiler its gradient path — hardware, a layer
    below, never imports it. None if the package is not installed (the cores then replay one after
    another, and a sendrecv finds no peer)."""
    if not _RENDEZVOUS:
        from importlib.metadata import entry_points
        _RENDEZVOUS.extend(entry.load() for entry in entry_points(group="trnlab.spmd_rendezvous"))
        if not _RENDEZVOUS:
            _RENDEZVOUS.append(None)
    return _RENDEZVOUS[0]


class DeviceError(ValueError):
    """A tensor or program used on the wrong device or core."""


def chip_spec(target) -> ChipSpec:
    if isinstance(target, ChipSpec):
        return target
    if isinstance(target, CoreSpec):
        for chip in CHIPS.values():
            if chip.core is target:
                return chip
        return ChipSpec(name=f"chip of {target.name}", core=target, cores=1,
                        hbm_bytes=target.hbm_bytes, hbm_bandwidth=target.hbm_bandwidth,
                        link="none", link_bandwidth=0.0, dma_engines=target.dma_engines)
    key = str(target).lower()
    if key not in CHIPS:
        raise ValueError(f"unknown device {target!r}; expected one of {sorted(CHIPS)} or a ChipSpec")
    return CHIPS[key]


@dataclass
class Run:
    """One launch of a program on a core of a device."""
    outputs: object
    core: NeuronCore
    region: str
    first: int                   # the launch's records in core.timeline: [first, end)
    end: int
    timing_only: bool

    @property
    def timeline(self) -> Timeline:
        t = self.core.timeline.sub(range(self.first, self.end))
        t.end_ns = self.start_ns + self.latency_ns       # the launch's end: its tear-down included
        return t

    @property
    def start_ns(self) -> float:
        """When the launch began: its first instruction, less the runtime's start-up (CoreSpec.launch_start_ns)."""
        records = self.core.timeline.records[self.first:self.end]
        return min((r[2] for r in records), default=0.0) - self.core.spec.launch_start_ns

    @property
    def latency_ns(self) -> float:
        """From the launch's start (`start_ns`) to its last result and the runtime's tear-down."""
        records = self.core.timeline.records[self.first:self.end]
        return max((r[4] for r in records), default=0.0) + self.core.spec.launch_end_ns - self.start_ns

    @property
    def latency_us(self) -> float:
        return self.latency_ns / 1e3

    def profile(self, dtype=None) -> Profile:
        return Profile.from_timeline(self.timeline, self.core.spec,
                                     dtype=dtype or self.core.matmul_dtype or "bfloat16")

    def profile_by_region(self, dtype=None) -> dict:
        """{region: Profile} of the program's regions in this launch (e.g. one per compiled op),
        by the program's region names."""
        t = self.core.timeline
        out = {}
        prefix = self.region + "/"
        names = [name for name, first, end in t.regions
                 if first >= self.first and end <= self.end and name.startswith(prefix)]
        for name in dict.fromkeys(names):
            indices = [i for i in t.region_records(name) if self.first <= i < self.end]
            out[name[len(prefix):]] = Profile.from_timeline(t.sub(indices), self.core.spec,
                                              dtype=dtype or self.core.matmul_dtype or "bfloat16")
        return out


@dataclass
class SpmdRun:
    """One launch of an SPMD grid over several cores of a device (`Device.run_spmd`)."""
    outputs: object
    runs: list                   # one Run per core, in the order of the programs
    timing_only: bool

    @property
    def start_ns(self) -> float:
        return min(r.start_ns for r in self.runs)

    @property
    def latency_ns(self) -> float:
        """From the first instruction on any core to the last result on any core."""
        return max(r.start_ns + r.latency_ns for r in self.runs) - self.start_ns

    @property
    def latency_us(self) -> float:
        return self.latency_ns / 1e3


class SpmdLaunch:
    """One SPMD launch in progress (`Device.spmd_launch`): its arguments are in HBM, and so is one
    tensor per `nl.shared_hbm` buffer, which all its cores read and write (`shared_hbm.py`)."""

    def __init__(self, device: "Device", programs: list, cores: list, args: tuple, shared: list, label: str):
        self.device, self.programs, self.cores, self.args, self.shared = device, programs, cores, args, shared
        self.label = label
        self.per_core: list = [None] * len(programs)
        columns = _shared_buffers(programs)            # per program, its shared buffers in order
        first = programs[0]
        tensors = [device.hbm.allocate(first.buffers[bid].shape, first.buffers[bid].dtype,
                                       name=first.buffers[bid].name) for bid in columns[0]]
        # full mode: writes the cores may both make to one element are timed (shared_hbm.py), on the reference path
        timed = device.full and len(programs) > 1 and not disjoint_writes(programs, columns)
        self.shared_hbm = SharedHBM(tensors, len(programs), timed) if tensors else None
        self.shared_of = [dict(zip(column, tensors)) for column in columns]   # per program: buffer id -> tensor

    def replay(self, i: int) -> Run:
        """Replay program i on its core (on the calling thread)."""
        program, nc = self.programs[i], self.device.cores[self.cores[i]]
        resident = {bid: t for (_, bid), t in zip(program.inputs, self.shared)}
        start = len(nc.timeline.records)
        nc.start_launch()
        # the arrays too (the resident copies are what runs): a trip count read from data finds its
        # values there in timing-only mode (dynamic_loops.py)
        arrays = [None if isinstance(v, Tensor) else v for v in self.args]
        shared = self.shared_hbm
        if shared is not None:                          # the shared tensors hold this core's records
            nc._shared_hbm = (shared, i)
            shared.enter(i, nc)
        try:
            tensors = execute(program, nc, arrays, region=self.label, hbm_tensors=resident,
                              shared=self.shared_of[i], checked=shared is not None and shared.timed)
        finally:
            if shared is not None:
                shared.leave(i)
                del nc._shared_hbm
        nc.end_launch()
        self.per_core[i] = (program, tensors, {**resident, **self.shared_of[i]})
        return Run(outputs=None, core=nc, region=self.label, first=start, end=len(nc.timeline.records),
                   timing_only=not self.device.full)

    def finish(self, runs: list) -> "SpmdRun":
        """The launch's outputs: a shared output is the one tensor the cores wrote; any other (an
        nl.private_hbm / nl.hbm tensor returned) is, element by element, what the cores wrote in their
        own copies (the later core wins where two wrote)."""
        device, first = self.device, self.programs[0]
        per_core = [p for p in self.per_core if p is not None]
        if device.full:
            gathered, own = {}, {}
            columns = [_output_buffers(p.outputs) for p, _, _ in per_core]
            for j, bid0 in enumerate(columns[0]):
                if bid0 in self.shared_of[0]:
                    gathered[bid0] = self.shared_of[0][bid0]
                else:
                    gathered[bid0] = own[bid0] = device._gather(
                        [t[col[j]] for (_, t, _), col in zip(per_core, columns)])
            outputs = read_outputs(first, gathered, True)
            for t in own.values():
                device.hbm.free(t)
        else:
            outputs = read_outputs(first, {}, False)
        return SpmdRun(outputs=outputs, runs=runs, timing_only=not device.full)

    def release(self) -> None:
        """Free the launch's HBM tensors (the cores' own, the shared ones and the arguments it put there)."""
        for program, tensors, resident in (p for p in self.per_core if p is not None):
            for bid, t in tensors.items():
                if bid not in resident and not t.freed:
                    self.device.hbm.free(t)
        for value, t in zip(self.args, self.shared):
            if not isinstance(value, Tensor):
                self.device.hbm.free(t)
        if self.shared_hbm is not None:
            for t in self.shared_hbm.tensors:
                if not t.freed:
                    self.device.hbm.free(t)
            self.shared_hbm.release()
            self.shared_hbm = None
        self.per_core = [None] * len(self.programs)
        self.shared = []


def _shared_buffers(programs: list) -> list:
    """Per program, the ids of its nl.shared_hbm buffers (not reshapes) that are one tensor of the launch,
    aligned: entry n of every list is the same tensor. Each core traces the same kernel, so normally the
    n-th shared buffer of each program. If the programs allocate different ones (an allocation under
    `if nl.program_id(0) == 0:`), program 0's are paired in order with the next of the same shape and
    dtype in each other program; one left unpaired stays its core's own (merged after the run, as an
    nl.private_hbm output)."""
    lists = [[b for b in p.buffers if b.memory == "hbm" and b.shared and b.alias_of is None] for p in programs]
    rows = []
    cursors = [0] * len(lists)
    for b in lists[0]:
        row = [b.id]
        for j, other in enumerate(lists[1:], start=1):
            match = next((m for m in range(cursors[j], len(other))
                          if (tuple(other[m].shape), other[m].dtype) == (tuple(b.shape), b.dtype)), None)
            if match is None:
                break
            row.append(other[match].id)
        if len(row) == len(lists):
            rows.append(row)
            for j in range(1, len(lists)):
                cursors[j] = next(m for m, o in enumerate(lists[j]) if o.id == row[j]) + 1
    return [[row[i] for row in rows] for i in range(len(lists))]


def _output_buffers(structure) -> list:
    """The buffer ids of a program's return structure, in order."""
    if isinstance(structure, dict) and set(structure) == {"buffer", "index"}:
        return [structure["buffer"]]
    if isinstance(structure, (list, tuple)):
        return [b for v in structure for b in _output_buffers(v)]
    if isinstance(structure, dict):
        return [b for v in structure.values() for b in _output_buffers(v)]
    return []


class Device:
    """One chip of `cores` NeuronCores (default: the chip's count) with shared HBM."""

    def __init__(self, target="trn2", mode: str = "full", cores: int | None = None, name: str = "device0"):
        self.chip = chip = chip_spec(target)
        self.spec = chip.core
        self.mode = mode
        self.name = name
        n = chip.cores if cores is None else int(cores)
        if not 1 <= n <= chip.cores:
            raise DeviceError(f"{chip.name} has {chip.cores} cores; asked for {n}")
        # a device of fewer cores than the chip is those cores' share of it (the rest are busy
        # elsewhere): HBM capacity and bandwidth in proportion
        share = n / chip.cores
        self.hbm = HBM(chip.core, mode == "full")
        self.hbm.capacity = int(chip.hbm_bytes * share)
        self.hbm_bandwidth = chip.hbm_bandwidth * share
        self._hbm_channel = Channel()
        self.cores = [NeuronCore(chip.core, mode=mode, name=f"{name}/core{i}", hbm=self.hbm,
                                 hbm_channel=self._hbm_channel, hbm_bandwidth=self.hbm_bandwidth)
                      for i in range(n)]
        self._launches = 0

    def __repr__(self) -> str:
        return f"Device({self.chip.name}, {len(self.cores)} cores, mode={self.mode!r})"

    @property
    def full(self) -> bool:
        return self.mode == "full"

    def tensor(self, array, name: str | None = None, dtype=None) -> Tensor:
        """A tensor in this device's HBM (it stays there until `free`)."""
        return self.hbm.tensor(array, name=name, dtype=dtype)

    def free(self, tensor: Tensor) -> None:
        self.hbm.free(tensor)

    def run(self, program: Program, *args, core: int = 0, region: str | None = None) -> Run:
        """Replay `program` on core `core` with arguments `args` (arrays, or tensors of this
        device's HBM); returns the outputs and the launch's place in the timeline."""
        if not 0 <= core < len(self.cores):
            raise DeviceError(f"core {core} does not exist: {self.chip.name} has {len(self.cores)} cores")
        if len(args) != len(program.inputs):
            names = ", ".join(n for n, _ in program.inputs)
            raise TypeError(f"program {program.name!r} takes {len(program.inputs)} arguments ({names}), "
                            f"got {len(args)}")
        nc = self.cores[core]
        resident, arrays = {}, []
        for (name, bid), value in zip(program.inputs, args):
            if isinstance(value, Tensor):
                if value.memory is not self.hbm:
                    raise DeviceError(f"argument {name!r}: tensor {value.name!r} belongs to another "
                                      f"device; copy it to {self.name} with device.tensor(...)")
                b = program.buffers[bid]
                if tuple(value.shape) != tuple(b.shape):
                    raise DeviceError(f"argument {name!r}: shape {value.shape}, the program was "
                                      f"traced for {tuple(b.shape)}")
                resident[bid] = value
                arrays.append(None)
            else:
                arrays.append(value)
        self._launches += 1
        label = region or f"{program.name}#{self._launches}"
        first = len(nc.timeline.records)
        nc.start_launch()
        tensors = execute(program, nc, arrays, region=label, hbm_tensors=resident)
        nc.end_launch()
        outputs = read_outputs(program, tensors, self.full)
        for bid, t in tensors.items():          # the launch's own HBM tensors are released
            if bid not in resident:
                self.hbm.free(t)
        return Run(outputs=outputs, core=nc, region=label, first=first,
                   end=len(nc.timeline.records), timing_only=not self.full)

    def run_spmd(self, programs: list, *args, cores: list | None = None, region: str | None = None) -> "SpmdRun":
        """Launch `programs[i]` on core `cores[i]` (default 0, 1, ...) at the same time: the SPMD
        programs of one kernel, each a part of its launch grid. The arguments are put in HBM once and
        read by every core; so is one tensor per nl.shared_hbm buffer (the n-th of each program), which
        the cores read and write (`shared_hbm.py`: each core's own dependency records, values in the
        order the barriers give, the later-ending write winning where both write one element between
        two barriers); an nl.private_hbm output is per core, merged element by element. The cores'
        DMAs share the device's HBM channel, so memory-bound programs slow each other down once
        together they need more than the device's bandwidth. The programs run together under the
        rendezvous the distributed layer lends (`_rendezvous`: a Cluster of these cores, launch core i =
        rank i): the Nth sendrecv / core_barrier of core 0 meets the Nth of core 1, each waiting for the
        other; a program runs on until it waits, so programs without them replay one after another."""
        launch = self.spmd_launch(programs, *args, cores=cores, region=region)
        cores = launch.cores
        together = _rendezvous() if len(cores) > 1 and not any(
            hasattr(self.cores[c], "_cc_fabric") for c in cores) else None
        try:
            if together is not None:
                # the cores meet at their sendrecv / core_barrier: they run together under the rendezvous the
                # distributed layer lends (launch core i = rank i; the Nth sendrecv of core 0 meets core 1's Nth)
                runs = together(self, cores, launch.replay, "core")
            else:
                runs = [launch.replay(i) for i in range(len(programs))]
            return launch.finish(runs)
        finally:
            launch.release()

    def spmd_launch(self, programs: list, *args, cores: list | None = None,
                    region: str | None = None) -> "SpmdLaunch":
        """The parts of `run_spmd`, for a caller that runs the cores itself (a Cluster of LNC=2 ranks runs
        every core of every rank together): the arguments put in HBM once; then `replay(i)` per core,
        `finish(runs)` for the launch's outputs, and `release()`."""
        cores = list(range(len(programs))) if cores is None else [int(c) for c in cores]
        if len(cores) != len(programs) or len(set(cores)) != len(cores):
            raise DeviceError(f"run_spmd: {len(programs)} programs need as many distinct cores, got {cores}")
        for c in cores:
            if not 0 <= c < len(self.cores):
                raise DeviceError(f"core {c} does not exist: {self.chip.name} device has "
                                  f"{len(self.cores)} cores (nl.spmd_dim asks for {len(cores)})")
        first = programs[0]
        shapes = [tuple(first.buffers[bid].shape) for _, bid in first.inputs]
        for p in programs[1:]:
            if [tuple(p.buffers[bid].shape) for _, bid in p.inputs] != shapes:
                raise DeviceError("run_spmd: the programs take arguments of different shapes")
        if len(args) != len(first.inputs):
            raise TypeError(f"program {first.name!r} takes {len(first.inputs)} arguments, got {len(args)}")
        shared = []                                   # one HBM copy of each argument, read by all cores
        for (name, bid), value in zip(first.inputs, args):
            b = first.buffers[bid]
            if isinstance(value, Tensor):
                shared.append(value)
            elif self.full:
                shared.append(self.hbm.tensor(value, name=name, dtype=b.dtype))
            else:
                shared.append(self.hbm.allocate(b.shape, b.dtype, name=name))
        self._launches += 1
        return SpmdLaunch(self, programs, cores, args, shared, region or f"{first.name}#{self._launches}")

    def _gather(self, parts: list) -> Tensor:
        """One tensor holding, element by element, what each of `parts` (the cores' copies of one
        output) had written; later parts win where two wrote the same element."""
        proto = parts[0]
        out = self.hbm.allocate(proto.shape, proto.dtype, name=proto.name)
        values = np.empty(proto.shape, dtype=proto.dtype)
        written = np.zeros(proto.shape, dtype=bool)
        for t in parts:
            mask = np.ones(t.shape, dtype=bool) if t.written is None else t.written
            np.copyto(values, t.data, where=mask)
            written |= mask
        if written.all():
            out.full.write(values)
        else:                                   # the unwritten rest reads as NaN poison / raises
            out.fill_partly(values, written)
        return out

    @property
    def now(self) -> float:
        return max(c.now for c in self.cores)

    def timelines(self) -> list[Timeline]:
        return [c.timeline for c in self.cores if len(c.timeline)]

    def chrome_trace(self, path=None) -> dict:
        """A Chrome / Perfetto trace: a process per core, a thread per engine, a row of regions."""
        return write_chrome_trace(self.timelines(), path)
