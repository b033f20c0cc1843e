"""nki.multi_rank_simulate — one kernel on every rank of a collective group at once, each rank its own inputs.

AWS's NKI (0.7, experimental) runs a kernel with collectives on several ranks in one CPU process:

    outs = nki.multi_rank_simulate(kernel, world_size=2,
                                   per_rank_inputs=[((x0, group), {}), ((x1, group), {})])   # outs[r]: rank r's

"Every rank runs the same kernel specialization": array arguments may hold different values on each rank
but have the same shape and dtype; every other argument is static and equal on every rank
[nki.multi_rank_simulate]. trnlab traces the kernel once, then replays the program on every rank of a
`trnlab.distributed.cluster.Cluster`, whose fabric matches the ranks' collectives, costs them with trnlab's
collective model over the topology's links, and moves the values. `multi_rank_run` returns that run
(outputs per rank, the cluster's timeline — a track per rank and engine —, latency, profile cores).

Ranks and cores: a kernel launched over ``nl.nc(k)`` (``kernel[nl.nc(2)]``, LNC=2; what
``nki.cpu_simulate(kernel)[2]`` launches) makes every rank a logical core of k physical cores; their
programs run together with every other rank's (a Cluster of ``lnc=k``), each physical core's collectives
meeting the same-numbered core of the other ranks (ASSUMED, `trnlab.hardware.collective.logical_rank`).
Placement (ASSUMED: AWS does not publish where its simulator puts ranks): the ranks' physical cores on
one chip if they fit (ranks x k <= cores per chip: collectives over the on-chip link), else one rank per
chip of the smallest instance of that chip with enough chips (collectives over its NeuronLink topology).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trnlab.nki.errors import NKIError


class MultiRankInputError(NKIError):
    """Rule: every rank runs the same kernel specialization (nki.multi_rank_simulate)."""


class MultiRankRun:
    """What `multi_rank_run` produced: `outputs[r]` rank r's outputs (None in timing mode); `cluster`
    the fabric (its `log` of collectives, `timeline()`, `chrome_trace()`); `cores` every physical core
    (rank-major), `core` rank 0's first; `latency_ns` the last result on any core."""

    def __init__(self, outputs: list, cluster, programs: list, timing_only: bool, lnc: int):
        self.outputs, self.cluster, self.programs = outputs, cluster, programs
        self.timing_only, self.lnc = timing_only, lnc
        self.program = programs[0]

    @property
    def world_size(self) -> int:
        return self.cluster.ranks

    @property
    def cores(self) -> list:
        return [self.cluster.core(s) for s in range(self.cluster.slots)]

    @property
    def core(self):
        return self.cluster.core(0)

    @property
    def latency_ns(self) -> float:
        return max(float(c.now) for c in self.cores)

    @property
    def latency_us(self) -> float:
        return self.latency_ns / 1e3

    def timeline(self, merge_dma: bool = True):
        """One Timeline of every rank: tracks "rank0 pe", "rank1 cc0", … ("rank0.core1 pe" at LNC=2)."""
        return self.cluster.timeline(merge_dma=merge_dma)

    def chrome_trace(self, path=None) -> dict:
        return self.cluster.chrome_trace(path)


def _pairs(world_size: int, per_rank_inputs) -> list:
    """per_rank_inputs as a list of (args, kwargs) in rank order."""
    if isinstance(per_rank_inputs, Mapping):
        if sorted(per_rank_inputs) != list(range(world_size)):
            raise MultiRankInputError(f"nki.multi_rank_simulate: per_rank_inputs as a mapping needs one key per rank "
                                      f"0..{world_size - 1}, got {sorted(per_rank_inputs)}")
        per_rank_inputs = [per_rank_inputs[r] for r in range(world_size)]
    pairs = list(per_rank_inputs)
    if len(pairs) != world_size:
        raise MultiRankInputError(f"nki.multi_rank_simulate: world_size={world_size} needs {world_size} "
                                  f"(args, kwargs) pairs, got {len(pairs)}")
    out = []
    for r, pair in enumerate(pairs):
        try:
            args, kwargs = pair
        except (TypeError, ValueError):
            raise MultiRankInputError(f"nki.multi_rank_simulate: rank {r}'s inputs must be an (args, kwargs) pair, "
                                      f"got {type(pair).__name__}") from None
        out.append((tuple(args), dict(kwargs)))
    return out


def _same_static(a, b) -> bool:
    try:
        same = a == b
        return bool(same) if not isinstance(same, np.ndarray) else bool(same.all())
    except Exception:                                # noqa: BLE001 - uncomparable: the same object only
        return a is b


def _check_specialization(pairs: list) -> None:
    """Arrays: same shape and dtype on every rank; other arguments: equal on every rank."""
    from trnlab.nki import _is_array, _to_numpy, _is_torch
    args0, kwargs0 = pairs[0]
    for r, (args, kwargs) in enumerate(pairs[1:], start=1):
        if len(args) != len(args0) or sorted(kwargs) != sorted(kwargs0):
            raise MultiRankInputError(f"nki.multi_rank_simulate: every rank passes the same parameters; rank 0 "
                                      f"passes {len(args0)} positional and {sorted(kwargs0)}, rank {r} "
                                      f"{len(args)} and {sorted(kwargs)}")
        named = [(f"argument {i}", a0, a) for i, (a0, a) in enumerate(zip(args0, args))]
        named += [(f"argument {k!r}", kwargs0[k], kwargs[k]) for k in sorted(kwargs0)]
        for what, a0, a in named:
            if _is_array(a0) or _is_array(a):
                a0 = _to_numpy(a0) if _is_torch(a0) else a0
                a = _to_numpy(a) if _is_torch(a) else a
                if (tuple(np.shape(a0)), np.dtype(getattr(a0, "dtype", None))) != \
                        (tuple(np.shape(a)), np.dtype(getattr(a, "dtype", None))):
                    raise MultiRankInputError(
                        f"nki.multi_rank_simulate: {what} is {tuple(np.shape(a))} {getattr(a, 'dtype', None)} on "
                        f"rank {r} but {tuple(np.shape(a0))} {getattr(a0, 'dtype', None)} on rank 0; tensors "
                        f"must have the same shape and dtype on every rank")
            elif not _same_static(a0, a):
                raise MultiRankInputError(f"nki.multi_rank_simulate: {what} is {a!r} on rank {r} but {a0!r} on "
                                          f"rank 0; non-tensor arguments are static and equal on every rank")


def _cluster_maker():
    """The function that builds the Cluster the ranks run on: `trnlab.distributed` lends it through the
    package's entry point (pyproject.toml, group "trnlab.multi_rank_cluster"), as it lends an SPMD launch
    its rendezvous — nki, a layer below, never imports distributed."""
    if not _CLUSTER_MAKER:
        from importlib.metadata import entry_points
        _CLUSTER_MAKER.extend(entry.load() for entry in entry_points(group="trnlab.multi_rank_cluster"))
        if not _CLUSTER_MAKER:
            raise NKIError("nki.multi_rank_simulate needs trnlab.distributed's cluster, lent through the "
                           "'trnlab.multi_rank_cluster' entry point: install trnlab (pip install -e .)")
    return _CLUSTER_MAKER[0]


_CLUSTER_MAKER: list = []


def multi_rank_run(kernel, *, world_size: int, per_rank_inputs, target=None, timing_only: bool | None = None,
                   algorithm: str | None = None) -> MultiRankRun:
    """Run `kernel` on `world_size` ranks at once, rank r with its (args, kwargs) of `per_rank_inputs`;
    returns a `MultiRankRun` (outputs per rank, the cluster's timeline and collectives log)."""
    from trnlab.hardware.device import chip_spec
    from trnlab.nki import (Kernel, ShapeDtype, _convert_outputs, _is_array, _is_torch, _to_numpy, locate, spmd,
                            trace)
    from trnlab.nki.platform import default_target
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    world_size = int(world_size)
    if world_size < 1:
        raise MultiRankInputError(f"nki.multi_rank_simulate: world_size is at least 1, got {world_size}")
    pairs = _pairs(world_size, per_rank_inputs)
    _check_specialization(pairs)
    timing = kernel.timing_only if timing_only is None else bool(timing_only)
    chip = chip_spec(target or kernel.target or default_target())
    lnc = spmd.cores_of(kernel.grid)
    args0, kwargs0 = pairs[0]
    if lnc > 1:
        programs = [trace(kernel, *args0, target=chip.core, grid=kernel.grid, points=tuple(p), **kwargs0)
                    for p in spmd.placement(kernel.grid)]
    else:
        programs = [trace(kernel, *args0, target=chip.core, grid=kernel.grid, **kwargs0)]
    as_torch = any(_is_torch(a) for a in list(args0) + list(kwargs0.values()))

    def arrays(args, kwargs) -> list:
        values = [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)] if _is_array(a)]
        return [_to_numpy(a) if _is_torch(a) else (None if isinstance(a, ShapeDtype) else a) for a in values]
    per_rank = [arrays(a, k) for a, k in pairs]
    cluster, slots = _cluster_maker()(chip, world_size, lnc, timing, algorithm)
    launches = []
    try:
        if lnc == 1:
            def body(slot: int):
                device, c = slots[slot]
                return device.run(programs[0], *per_rank[slot], core=c)
            results = cluster.run_each(body)
        else:
            for r in range(world_size):
                device = slots[r * lnc][0]
                launches.append(device.spmd_launch(programs, *per_rank[r],
                                                   cores=[c for _, c in slots[r * lnc:(r + 1) * lnc]]))
            runs = cluster.run_each(lambda slot: launches[slot // lnc].replay(slot % lnc))
            results = [launch.finish(runs[r * lnc:(r + 1) * lnc]) for r, launch in enumerate(launches)]
    except Exception as error:
        raise locate(error)
    finally:
        for launch in launches:
            launch.release()
        cluster.release()
    outputs = [None if timing else _convert_outputs(r.outputs, as_torch) for r in results]
    return MultiRankRun(outputs, cluster, programs, timing, lnc)


def multi_rank_simulate(kernel, *, world_size: int, per_rank_inputs) -> list:
    """nki.multi_rank_simulate(kernel, world_size=, per_rank_inputs=): each rank's outputs, in rank order."""
    return multi_rank_run(kernel, world_size=world_size, per_rank_inputs=per_rank_inputs).outputs
