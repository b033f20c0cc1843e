"""A cluster: the ranks of a topology as simulated NeuronCores that run programs with collectives.

    cluster = Cluster(topology.TRN2_48XLARGE, ranks=2)          # rank r = core 0 of chip r
    runs = cluster.run(program, [(x0, w0), (x1, w1)])            # one argument tuple per rank
    runs[0].outputs, cluster.timeline(), cluster.chrome_trace("trace.json")

Every rank replays the program on its own core (`trnlab.hardware.device.Device.run`, unchanged);
the collective instructions of the program (`trnlab.hardware.collective`: ``all_reduce`` ... on the
core's ``cc0`` / ``cc1`` engines) meet here. The cluster is their *fabric*:

- **matching**: the k-th collective a rank issues on a rank list meets the k-th collective of the
  other ranks of that list (program order); op, shape and dtype must agree, else `CollectiveError`.
- **time**: the group starts when the last rank's operands and CC engine are ready, and takes
  `collectives.best_algorithm(...)` (or the algorithm asked for) over the topology's links for
  the group's size — the same cost model as everywhere in `trnlab.distributed` (the documented link
  figures, or with ``calibration=topology.NCCOM_TRN1`` the model fitted to AWS's measurements). Meanwhile the
  compute engines go on with whatever does not depend on the result: that is the overlap.
- **values** (full mode): all-reduce, reduce-scatter and all-gather run the step-by-step NumPy
  algorithms of `collectives` (ring, rdh, mesh, as the cost model chose; sums in float32, stored in
  the destination dtype); collective_permute copies.

Ranks run as threads that hand a baton to each other — only one runs at a time, in a fixed order,
so a run is deterministic; a rank that waits for a collective passes the baton on. If every rank
still running waits for a collective the others never issue (mismatched programs), the run stops
with a `CollectiveError` naming who waits for what — never a hang.

The same rendezvous serves the cores of one `nl.nc(2)` SPMD launch: `Device.run_spmd` borrows
`run_cores_together` (lent through the package's entry point "trnlab.spmd_rendezvous", so hardware never
imports this layer), a Cluster over the launch's cores of that device whose `run_each` replays each
core, so their sendrecv / core_barrier meet as ranks 0, 1.

Ranks of LNC=2 (``Cluster(..., lnc=2, slots=[(device, core), ...])``, what `trnlab.nki.multi_rank_run`
builds for ``kernel[nl.nc(2)]``): rank r is a logical core of physical cores ("slots") 2r, 2r + 1, every
slot runs on its own thread under the baton; replica groups name logical ranks and each physical core's
collectives meet the same-numbered core of the other ranks (`hardware.collective.logical_rank`), while
its sendrecv / core_barrier meet its own rank's other core. `log` names logical ranks (and the core).

Not modelled: the DMA engines the CC cores share with compute ([CCO] describes the contention);
strided replica groups are costed as the first ranks of the topology (`Topology.group`).
"""
from __future__ import annotations

import threading

import numpy as np

from trnlab.distributed import collectives
from trnlab.distributed.topology import Topology, chip_cores, devices
from trnlab.hardware import collective as hw_collective
from trnlab.hardware.collective import CollectiveError, Request
from trnlab.hardware.device import Device, Run
from trnlab.hardware.timeline import Timeline, write_chrome_trace

_DEADLOCK_CHECK_S = 600.0  # a baton wait longer than this means a bug in the scheduler, not the program


class _Abort(Exception):
    """Raised in a rank thread when another rank failed: stop quietly."""


class Cluster:
    """`ranks` ranks of `topology` (default all; one Device per chip, or the cores of one chip)."""

    def __init__(self, topology: Topology, ranks: int | None = None, mode: str = "full",
                 algorithm: str | None = None, calibration=None, device: Device | None = None,
                 cores: list | None = None, lnc: int = 1, slots: list | None = None):
        self.topology = topology
        self.ranks = topology.ranks if ranks is None else int(ranks)
        self.mode = mode
        self.algorithm = algorithm  # None: the fastest the model offers for each size
        self.calibration = calibration  # None: the documented link figures; topology.NCCOM_TRN1: fitted
        # LNC=k: each rank is a logical core of k physical cores, slots r*k .. r*k + k - 1 (`slots`: the
        # (device, core) of every slot, rank-major); their collectives meet lane by lane
        # (hardware.collective.logical_rank), their sendrecv / core_barrier within the rank
        self.lnc = int(lnc)
        if slots is not None:
            self.devices = list(dict.fromkeys(d for d, _ in slots))
            self.cores = [(d, int(c)) for d, c in slots]
        elif device is not None:                # given cores of an existing device (an SPMD launch's)
            self.devices: list[Device] = [device]
            self.cores = [(device, int(c)) for c in (cores if cores is not None else range(self.ranks))]
        else:
            self.devices = devices(topology, mode=mode, count=self.ranks)
            if topology.rank_name == "core":
                self.cores = [(self.devices[0], r) for r in range(self.ranks)]
            else:
                self.cores = [(d, 0) for d in self.devices]
        if len(self.cores) != self.ranks * self.lnc:
            raise ValueError(f"{self.ranks} ranks of LNC={self.lnc} need {self.ranks * self.lnc} cores, got "
                             f"{len(self.cores)}")
        for slot, (device, c) in enumerate(self.cores):
            core = device.cores[c]
            core._cc_fabric = self
            core._cc_rank = slot
            if self.lnc > 1:
                core._cc_lnc = self.lnc
        self.log: list[dict] = []   # one row per resolved collective (op, ranks, bytes, algorithm, times)
        self._reset()

    def release(self) -> None:
        """Detach the cores from this fabric (they run alone again)."""
        for device, c in self.cores:
            core = device.cores[c]
            if getattr(core, "_cc_fabric", None) is self:
                del core._cc_fabric, core._cc_rank
                core.__dict__.pop("_cc_lnc", None)

    def __repr__(self) -> str:
        return f"Cluster({self.topology.name}, {self.ranks} ranks, mode={self.mode!r})"

    @property
    def slots(self) -> int:
        """The physical cores taking part: ranks x LNC."""
        return len(self.cores)

    def core(self, slot: int):
        """The NeuronCore of fabric slot `slot` (the rank itself at LNC=1)."""
        device, c = self.cores[slot]
        return device.cores[c]

    def slot_name(self, slot: int) -> str:
        return f"rank{slot}" if self.lnc == 1 else f"rank{slot // self.lnc}.core{slot % self.lnc}"

    # -- running ---------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._state = ["ready"] * self.slots     # ready | blocked | done
        self._running: int | None = None
        self._error: BaseException | None = None
        self._pending: dict = {}                 # (members, k) -> {rank: Request}
        self._results: dict = {}                 # (rank, key) -> (start, end)
        self._counts: dict = {}                  # (rank, members) -> collectives issued so far
        self._waiting: dict = {}                 # rank -> description of what it waits for

    def run(self, program, args: list, region: str | None = None) -> list[Run]:
        """Replay `program` (or one program per rank) on every rank, `args[r]` being rank r's
        argument tuple; returns each rank's `Run`."""
        if self.lnc > 1:
            raise ValueError("Cluster.run replays one program per rank (LNC=1); ranks of LNC=2 run their SPMD "
                             "launches with trnlab.nki.multi_rank_run")
        programs = program if isinstance(program, (list, tuple)) else [program] * self.ranks
        if len(programs) != self.ranks or len(args) != self.ranks:
            raise ValueError(f"{self.ranks} ranks need {self.ranks} programs and argument tuples, got "
                             f"{len(programs)} and {len(args)}")

        def replay(rank: int) -> Run:
            device, c = self.cores[rank]
            return device.run(programs[rank], *args[rank], core=c, region=region)
        return self.run_each(replay)

    def run_each(self, body_of_rank, label: str = "rank") -> list:
        """Run `body_of_rank(r)` for every rank r together, one thread per rank under the baton (the
        rendezvous of the collectives they issue); returns each rank's result. `Device.run_spmd` runs
        the cores of one launch through it (label "core")."""
        self._reset()
        runs: list = [None] * self.slots
        errors: list[BaseException | None] = [None] * self.slots

        def body(rank: int) -> None:
            try:
                self._wait_turn(rank)
                runs[rank] = body_of_rank(rank)
            except _Abort:
                pass
            except BaseException as error:  # noqa: BLE001 - handed to the caller below
                errors[rank] = error
                with self._cond:
                    if self._error is None:
                        self._error = error
                    self._cond.notify_all()
            finally:
                with self._cond:
                    self._state[rank] = "done"
                    if self._running == rank:
                        self._pass_on(rank)

        threads = [threading.Thread(target=body, args=(r,), name=self.slot_name(r), daemon=True)
                   for r in range(self.slots)]
        with self._cond:
            self._running = 0
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        first = next((e for e in errors if e is not None), None)
        if first is None and self._error is not None:
            raise self._error          # the ranks never met: raised by the scheduler, not by a rank
        if first is not None:
            rank = errors.index(first)
            if isinstance(first, CollectiveError) or not first.args:
                raise first
            where = f"{label} {rank}" if self.lnc == 1 else f"{label} {rank // self.lnc} (core {rank % self.lnc})"
            first.args = (f"{where}: {first.args[0]}",) + tuple(first.args[1:])
            raise first
        return runs

    def _wait_turn(self, rank: int) -> None:
        with self._cond:
            while self._running != rank and self._error is None:
                if not self._cond.wait(timeout=_DEADLOCK_CHECK_S):
                    raise RuntimeError(f"rank {rank} waited {_DEADLOCK_CHECK_S:.0f} s for its turn")
            if self._error is not None:
                raise _Abort()

    def _pass_on(self, rank: int) -> None:
        """Give the baton to the next ready rank after `rank` (caller holds the lock)."""
        for k in range(1, self.slots + 1):
            q = (rank + k) % self.slots
            if self._state[q] == "ready":
                self._running = q
                self._cond.notify_all()
                return
        self._running = None
        blocked = [r for r in range(self.slots) if self._state[r] == "blocked"]
        if blocked and self._error is None:
            waits = "; ".join(f"rank {r} waits in {self._waiting[r]}" for r in blocked)
            self._error = CollectiveError(
                f"collective: ranks never met — {waits}; every other rank has finished (the k-th collective "
                f"of each rank of a list must be the same one on all of them)", value=blocked, limit="matching")
        self._cond.notify_all()

    # -- the fabric (called by hardware.collective on a rank's thread) -----------------------------
    def collective(self, request: Request) -> tuple[float, float]:
        rank, members = request.rank, request.members
        with self._cond:
            k = self._counts.get((rank, members), 0)
            self._counts[(rank, members)] = k + 1
            key = (members, k)
            pending = self._pending.setdefault(key, {})
            if pending:
                _check_same(next(iter(pending.values())), request)
            pending[rank] = request
            if len(pending) == len(members):
                del self._pending[key]
                self._resolve(key, pending)
                for q in members:
                    if q != rank:
                        self._state[q] = "ready"
                return self._results.pop((rank, key))
            self._state[rank] = "blocked"
            self._waiting[rank] = (f"collective #{k} ({request.opcode} of {request.nbytes:,} bytes) on ranks "
                                   f"{list(members)}, which ranks {[q for q in members if q not in pending]} "
                                   f"have not issued")
            self._pass_on(rank)
            while self._running != rank and self._error is None:
                if not self._cond.wait(timeout=_DEADLOCK_CHECK_S):
                    raise RuntimeError(f"rank {rank} waited {_DEADLOCK_CHECK_S:.0f} s in a collective")
            if self._error is not None:
                raise _Abort()
            return self._results.pop((rank, key))

    def cost(self, opcode: str, nbytes: int, ranks: int) -> collectives.CollectiveCost:
        """The modelled time of one collective over `ranks` ranks of this cluster's topology."""
        # ASSUMED: a v collective costs an all-gather of its whole buffer (its counts are known only at
        # run time; an all-to-all sends (p-1)/p of each rank's buffer, as an all-gather of that size does);
        # the fixed-size all_to_all likewise
        op = {"collective_permute": "send_recv", "sendrecv": "send_recv", "core_barrier": "send_recv",
              "collective_permute_reduce": "send_recv",
              "all_gather_v": "all_gather", "all_to_all_v": "all_gather", "all_to_all": "all_gather"}.get(opcode, opcode)
        cal = self.calibration
        if op == "send_recv" or ranks == 1:
            return collectives.cost(op, nbytes, self.topology, "ring", max(ranks, 2) if op == "send_recv" else 1,
                                    calibration=cal)
        if self.algorithm is None:
            return collectives.best_algorithm(op, nbytes, self.topology, ranks, calibration=cal)
        return collectives.cost(op, nbytes, self.topology, self.algorithm, ranks, calibration=cal)

    def _resolve(self, key, requests: dict) -> None:
        members = key[0]
        first = requests[members[0]]
        start = max(r.ready_ns for r in requests.values())
        c = self.cost(first.opcode, first.nbytes, len(members))
        end = start + c.time_ns
        for q in members:
            self._results[(q, key)] = (start, end)
        entry = {"op": first.opcode, "ranks": [m // self.lnc for m in members], "bytes": first.nbytes,
                 "algorithm": c.algorithm, "start_ns": start, "end_ns": end}
        if self.lnc > 1:
            entry["core"] = members[0] % self.lnc          # the lane: the ranks' physical core that met
        self.log.append(entry)
        if self.mode == "full":
            _compute_values(first.opcode, [requests[q] for q in members], c.algorithm, first.attrs)

    # -- what happened ---------------------------------------------------------------------------
    def timelines(self) -> list[Timeline]:
        return [self.core(r).timeline for r in range(self.slots)]

    def timeline(self, ranks=None, merge_dma: bool = True) -> Timeline:
        """One Timeline of several ranks (default all): tracks "rank0 pe", "rank0 dma", "rank0 cc0", …
        (the DMA queues of a rank merged into one track unless `merge_dma=False`; at LNC=2 "rank0.core1 pe",
        and `ranks` counts slots)."""
        ranks = range(self.slots) if ranks is None else ranks
        engines: list[str] = []
        records = []
        for r in ranks:
            t = self.core(r).timeline
            mapping = {}
            for eid, name in enumerate(t.engines):
                track = f"{self.slot_name(r)} " + ("dma" if merge_dma and name.startswith("dma") else name)
                if track not in engines:
                    engines.append(track)
                mapping[eid] = engines.index(track)
            records += [(mapping[rec[0]],) + tuple(rec[1:]) for rec in t.records]
        merged = Timeline(engines, name=f"{self.topology.name}: {len(list(ranks))} ranks")
        merged.records = records
        return merged

    def chrome_trace(self, path=None) -> dict:
        """A Chrome / Perfetto trace: a process per rank, a thread per engine (cc0, cc1 included)."""
        return write_chrome_trace(self.timelines(), path)


def _check_same(a: Request, b: Request) -> None:
    same_attrs = a.opcode == "sendrecv" or a.attrs == b.attrs      # (sendrecv's ranks are each core's own)
    if (a.opcode, tuple(a.src.shape), a.src.tensor.dtype) != (b.opcode, tuple(b.src.shape), b.src.tensor.dtype) \
            or not same_attrs:
        raise CollectiveError(
            f"collective: ranks {a.rank} and {b.rank} met in different collectives: {a.opcode} of "
            f"{tuple(a.src.shape)} {a.src.tensor.dtype} {a.attrs} against {b.opcode} of {tuple(b.src.shape)} "
            f"{b.src.tensor.dtype} {b.attrs}", value=(b.opcode, tuple(b.src.shape)), limit=(a.opcode, tuple(a.src.shape)))


_REDUCE = {"add": np.add, "minimum": np.minimum, "maximum": np.maximum}


def _compute_values(opcode: str, requests: list[Request], algorithm: str, attrs: dict) -> None:
    """Read every rank's src, run the collective, write every rank's dst (ranks in rank-list order)."""
    if opcode in hw_collective.V_OPCODES:       # counts read from each rank's metadata tensor
        hw_collective.variable_values(opcode, requests)
        return
    if opcode == "sendrecv":                    # the two cores of a logical core exchange tiles
        hw_collective.sendrecv_values(requests)
        return
    if opcode == "core_barrier":                # a barrier moves no data
        return
    if opcode == "all_to_all":                  # pieces moved, not computed: any dtype, exactly
        hw_collective.all_to_all_values(requests)
        return
    if opcode == "collective_permute_reduce":   # op(src0, src1) of each source, to its target
        hw_collective.permute_reduce_values(requests)
        return
    inputs = []
    for r in requests:
        r.src.check_initialized()
        inputs.append(np.asarray(r.src.values(), dtype=np.float32).reshape(r.src.shape))
    name = algorithm.split()[1] if algorithm.startswith("hierarchical") else algorithm
    name = name if name in ("ring", "rdh", "mesh", "tree") else "ring"
    if opcode == "collective_permute":
        by_rank = {r.rank: r for r in requests}
        for source, target in attrs["source_target_pairs"]:
            _store(by_rank[target].dst, inputs[[r.rank for r in requests].index(source)])
        return
    p = len(requests)
    op = attrs.get("op", "add")
    if attrs.get("collective_dim", 0) == 1:     # a 2D SBUF tile split along its free dim: gather columns
        inputs = [x.T for x in inputs]
        dsts = [r.dst for r in requests]
        outs = _along_dim0(opcode, inputs, name, op, p)
        for dst, out in zip(dsts, outs):
            _store(dst, np.reshape(out, (dst.shape[1], dst.shape[0])).T)
        return
    if opcode == "all_reduce":
        outs = collectives.all_reduce(inputs, name) if op == "add" else [_REDUCE[op].reduce(inputs)] * p
    elif opcode == "reduce_scatter":
        rows = inputs[0].shape[0] // p
        if op == "add":
            name = name if name != "tree" else "ring"
            # the flat pieces of the executed algorithm are the dim-0 pieces of the tensor (row-major)
            outs = collectives.reduce_scatter(inputs, name)
        else:
            total = _REDUCE[op].reduce(inputs)
            outs = [total[i * rows:(i + 1) * rows] for i in range(p)]
    else:  # all_gather
        name = name if name != "tree" else "ring"
        outs = collectives.all_gather(inputs, name)
    for r, out in zip(requests, outs):
        _store(r.dst, out)


def _along_dim0(opcode: str, inputs: list, name: str, op: str, p: int) -> list:
    """all_gather / reduce_scatter of (transposed) tiles along dim 0, flat results."""
    name = name if name != "tree" else "ring"
    if opcode == "all_gather":
        return collectives.all_gather(inputs, name)
    if op == "add":
        return collectives.reduce_scatter(inputs, name)
    total = _REDUCE[op].reduce(inputs)
    rows = total.shape[0] // p
    return [total[i * rows:(i + 1) * rows] for i in range(p)]


def _store(dst, values: np.ndarray) -> None:
    dst.write(np.reshape(values, dst.shape).astype(dst.tensor.dtype, copy=False))


__all__ = ["Cluster", "CollectiveError", "hw_collective"]


def run_cores_together(device: Device, cores: list, body_of_core, label: str = "core") -> list:
    """Run `body_of_core(i)` for the cores `cores` of `device` together under a Cluster of those cores
    (launch core i = rank i), then detach them: the rendezvous `Device.run_spmd` borrows for an SPMD
    launch over several cores (lent through the entry point "trnlab.spmd_rendezvous")."""
    fabric = Cluster(chip_cores(device.chip), ranks=len(cores), mode=device.mode, device=device, cores=cores)
    try:
        return fabric.run_each(body_of_core, label=label)
    finally:
        fabric.release()
