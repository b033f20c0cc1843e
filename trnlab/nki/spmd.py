"""SPMD launch grids over several NeuronCores: `kernel[nl.spmd_dim(g, nl.nc(2)), m](...)`.

A grid axis written with `nl.nc(k)` or `nl.spmd_dim(..., nl.nc(k))` spreads its programs over k
physical NeuronCores (AWS's nki.language.nc and nki.language.spmd_dim pages give the placement; see
`trnlab.nki.language.spmd_dim.core_of`). trnlab traces one program per core — the grid points that
core runs, in grid order — and launches them together on one simulated device
(`Device.run_spmd`): the cores share the arguments in HBM and the chip's HBM bandwidth, every
`nl.shared_hbm` tensor (outputs and a kernel's internal ones) is one HBM tensor that all the cores read
and write (`nl.private_hbm` / `nl.hbm` one per core), and the cores meet at their `nisa.sendrecv` /
`nisa.core_barrier` (the Nth of core 0 with the Nth of core 1, as on a `Cluster`): what a core wrote
before a barrier is there for the other core after it (`trnlab.hardware.shared_hbm`). A grid without
such an axis stays on one core, its programs one after another (the single-core path in `trnlab.nki.run`).
"""
from __future__ import annotations

import math
import operator

from trnlab.nki.errors import LaunchGridError, NKIError
from trnlab.nki.language import nc, spmd_dim


def grid_entry(entry):
    """A launch-grid axis as `Kernel` keeps it: an int, or an spmd_dim (which is an int) that
    remembers its cores; a bare `nl.nc(k)` is the axis of k programs, program i on core i.

    An axis counts the programs along it ("Number of SPMD programs along the given axes in the
    launch grid", nki.language.num_programs): `kernel[0]` would launch none and return no output,
    so it is refused (LaunchGridError), as is a negative or non-integer size."""
    if isinstance(entry, spmd_dim):
        out = entry
    elif isinstance(entry, nc):
        out = spmd_dim(entry, 1)
    else:
        try:
            out = operator.index(entry)
        except TypeError:
            raise LaunchGridError(f"SPMD launch grid: an axis is a number of programs (an int), "
                                  f"got {entry!r}") from None
    if int(out) < 1:
        raise LaunchGridError(f"SPMD launch grid: an axis of {int(out)} programs; every axis needs at least 1 "
                              f"(kernel[0] would run nothing and return no output)")
    return out


def cores_of(grid: tuple) -> int:
    """How many physical cores the grid spreads over (1: no nl.nc axis)."""
    return math.prod(getattr(g, "cores", 1) for g in grid) if grid else 1


def placement(grid: tuple) -> list[list[tuple]]:
    """Per physical core, the grid points it runs (in grid order). The core of a point combines
    its nl.nc axes' cores, the first such axis most significant."""
    from trnlab.nki import _grid_points
    k = cores_of(grid)
    per_core: list[list[tuple]] = [[] for _ in range(k)]
    for point in _grid_points(grid):
        core = 0
        for g, i in zip(grid, point):
            cores = getattr(g, "cores", 1)
            if cores > 1:
                core = core * cores + g.core_of(i)
        per_core[core].append(point)
    return per_core


def run_on_cores(kernel, args, kwargs, *, target, timing: bool, grid: tuple, device=None, core: int = 0):
    """Trace a program per core and launch them together; returns an `SpmdKernelRun`."""
    from trnlab.hardware.device import Device
    from trnlab.nki import (KernelRun, ShapeDtype, _convert_outputs, _is_array, _is_torch, _to_numpy,
                            locate, trace)
    points = placement(grid)
    k = len(points)
    if device is None:
        from trnlab.hardware.device import chip_spec
        from trnlab.nki.platform import default_target
        target = target or default_target()
        chip = chip_spec(target)
        if k > chip.cores:
            raise NKIError(f"launch grid {grid} spreads over {k} NeuronCores (nl.nc), but a "
                           f"{chip.name} chip has {chip.cores}")
        device = Device(target, mode="timing" if timing else "full", cores=k)
        core = 0
    elif device.full == timing:
        raise NKIError(f"{device!r} runs in {device.mode!r} mode; timing_only={timing} asks for the other")
    elif core + k > len(device.cores):
        raise NKIError(f"launch grid {grid} needs {k} NeuronCores from core {core}; {device!r} has "
                       f"{len(device.cores)}")
    target = device.spec
    programs = [trace(kernel, *args, target=target, grid=grid, points=tuple(p), **kwargs) for p in points]
    as_torch = any(_is_torch(a) for a in list(args) + list(kwargs.values()))
    arrays = [a for a in list(args) + [kwargs[n] for n in sorted(kwargs)] if _is_array(a)]
    arrays = [_to_numpy(a) if _is_torch(a) else (None if isinstance(a, ShapeDtype) else a) for a in arrays]
    try:
        launch = device.run_spmd(programs, *arrays, cores=list(range(core, core + k)))
    except Exception as error:
        raise locate(error)
    outputs = _convert_outputs(launch.outputs, as_torch)
    return SpmdKernelRun(outputs=outputs, core=launch.runs[0].core, timing_only=timing,
                         program=programs[0], launch=launch, device=device, programs=programs)


def _kernel_run_type():
    from trnlab.nki import KernelRun
    return KernelRun


class SpmdKernelRun(_kernel_run_type()):
    """What a launch over several cores produced: `latency_ns` runs from the first instruction on
    any core to the last result on any; `core`, `timeline`, `profile()` are core 0's (`cores`,
    `profiles()` give every core's)."""

    def __init__(self, *, device, programs, **fields):
        super().__init__(**fields)
        self.device = device
        self.programs = programs

    @property
    def cores(self) -> list:
        return [r.core for r in self.launch.runs]

    @property
    def latency_ns(self) -> float:
        return float(self.launch.latency_ns)

    def profile(self, dtype=None):
        return self.launch.runs[0].profile(dtype)

    def profiles(self, dtype=None) -> list:
        return [r.profile(dtype) for r in self.launch.runs]

    def chrome_trace(self, path=None) -> dict:
        return self.device.chrome_trace(path)
