"""trnlab.nki — AWS's Neuron Kernel Interface, executed on the simulated NeuronCore (`trnlab.hardware`).

A kernel written for NKI runs here unmodified through `python -m trnlab.nki run script.py` (the
zero-edit hook serves AWS's `nki` / `neuronxcc.nki` names from this package: zero_edit.py), or with
its imports changed::

    import trnlab.nki as nki
    import trnlab.nki.language as nl
    import trnlab.nki.isa as nisa

    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    c = add_kernel(a_np, b_np)                      # NumPy in, NumPy out (torch in, torch out)
    c = add_kernel[4, 2](a_np, b_np)                # SPMD grid: nl.program_id(0), nl.program_id(1)
    run = nki.run(add_kernel, a_np, b_np)           # outputs + simulated latency, timeline, profile

Every call creates a fresh `NeuronCore` for the target preset (default Trn2, or `target="trn1"|"trn3"`
or any `CoreSpec`), copies the inputs into its HBM, runs the Python kernel (whose `nl.*`/`nisa.*` calls
issue instructions to that core), and copies the returned HBM tensors out. SPMD programs of a grid run
one after another on the same core and share `nl.shared_hbm` outputs; a grid axis of `nl.nc(k)` /
`nl.spmd_dim(..., nl.nc(k))` spreads them over k cores of one device, launched together (`spmd.py`). `timing_only=True` costs and
schedules every instruction without computing values (outputs are None): for large shapes.

`nki.simulate_kernel` / `nki.simulate` / `nki.cpu_simulate` (AWS's CPU-simulator entry points) return outputs;
`nki.multi_rank_simulate` runs a kernel with collectives on every rank at once, each rank its own inputs
(`multi_rank.py`, on a `trnlab.distributed.cluster.Cluster`);
`nki.benchmark` and `nki.profile` (on real hardware, device measurements) return the simulated
latency, timeline and profile, and `nki.profile` writes a Chrome/Perfetto trace.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass

import numpy as np

from trnlab import config
from trnlab.hardware import _gc
from trnlab.hardware.program import ProgramCache
from trnlab.nki import isa, language, typing  # noqa: F401  (nki.language / nki.isa / nki.typing)
from trnlab.nki import launches, runaway
from trnlab.nki.argument_dtypes import refuse_dtype_the_chip_lacks
from trnlab.nki.errors import MaskError, NKIError, locate, site_note  # noqa: F401
from trnlab.nki.errors import _notes as _error_notes
from trnlab.nki.platform import default_target
from trnlab.nki.tensor import NkiTensor

__all__ = ["jit", "run", "trace", "region", "simulate_kernel", "simulate", "cpu_simulate", "multi_rank_simulate",
           "multi_rank_run", "benchmark", "profile", "baremetal", "KernelRun",
           "ShapeDtype", "NKIError", "language", "isa", "tensor"]

tensor = NkiTensor  # nki.tensor: the type of kernel arguments and tiles (for annotations)


@dataclass(frozen=True)
class ShapeDtype:
    """A kernel argument with a shape and dtype but no values, for timing-only runs of large shapes."""
    shape: tuple
    dtype: object


@dataclass
class KernelRun:
    """What one simulated kernel launch produced."""
    outputs: object              # NumPy arrays / torch tensors, as the kernel returned them (None in timing mode)
    core: object                 # the trnlab.hardware.NeuronCore it ran on
    timing_only: bool
    program: object = None       # the traced trnlab.hardware.Program
    launch: object = None        # the trnlab.hardware.device.Run (its records in core.timeline)

    @property
    def timeline(self):
        return self.core.timeline

    @property
    def latency_ns(self) -> float:
        return float(self.core.now)

    @property
    def latency_us(self) -> float:
        return self.latency_ns / 1e3

    def profile(self, dtype=None):
        """The run's Profile; MFU against `dtype`'s tensor-engine peak, by default the dtype the
        kernel's matmuls multiplied (fp32 inputs: the fp32 peak, a quarter of bf16's)."""
        return self.core.profile(dtype)


# -- argument and result conversion ----------------------------------------------------------------
def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _to_numpy(x) -> np.ndarray:
    import torch
    t = x.detach().cpu()
    if t.dtype == torch.bfloat16:
        from trnlab.hardware import dtypes
        return t.view(torch.int16).numpy().view(dtypes.bfloat16)
    return t.numpy()


def _to_torch(a: np.ndarray):
    import torch
    from trnlab.hardware import dtypes
    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _is_array(value) -> bool:
    from trnlab.hardware import Tensor
    return isinstance(value, (np.ndarray, ShapeDtype, Tensor)) or _is_torch(value)


def _signature(value):
    """What a traced program depends on in one argument: shape and dtype of an array, else the value."""
    if _is_torch(value):
        return ("array", tuple(value.shape), str(value.dtype).replace("torch.", ""))
    if _is_array(value):
        dtype = np.dtype(value.dtype) if not isinstance(value, ShapeDtype) else value.dtype
        return ("array", tuple(value.shape), str(dtype))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_signature(v) for v in value)
    try:
        hash(value)
        return ("value", value)
    except TypeError:
        return ("repr", repr(value))


def _trace_argument(value, name: str, launch):
    """Kernel arguments: arrays/tensors become the program's HBM inputs; others pass through."""
    if _is_torch(value):
        value = ShapeDtype(tuple(value.shape), str(value.dtype).replace("torch.", ""))
    if _is_array(value):
        refuse_dtype_the_chip_lacks(value.dtype, name)
        return NkiTensor.allocation(launch.core.input(value, name), "shared_hbm", launch)
    return value


def _output_structure(value, recorder):
    """The kernel's return value with every HBM tensor replaced by {"buffer": id, "index": ...}."""
    if isinstance(value, NkiTensor):
        if value.buffer not in ("hbm", "shared_hbm", "private_hbm"):
            raise NKIError(f"a kernel returns HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm)); this one is in "
                           f"{value.buffer.upper()}: nl.store it into an HBM tensor and return that")
        view = value.hw_view()
        return {"buffer": recorder.buffer_of(view.tensor), "index": view.index}
    if isinstance(value, (tuple, list)):
        return type(value)(_output_structure(v, recorder) for v in value)
    if isinstance(value, dict):
        return {k: _output_structure(v, recorder) for k, v in value.items()}
    return value


def _convert_outputs(value, as_torch: bool):
    if isinstance(value, np.ndarray):
        return _to_torch(value) if as_torch else value
    if isinstance(value, (tuple, list)):
        return type(value)(_convert_outputs(v, as_torch) for v in value)
    if isinstance(value, dict):
        return {k: _convert_outputs(v, as_torch) for k, v in value.items()}
    return value


# -- the kernel object ------------------------------------------------------------------------------
class Kernel:
    """An @nki.jit function: call it with arrays to run it; `kernel[gx, gy](...)` for an SPMD grid."""

    def __init__(self, func, grid: tuple = (), target=None, timing_only: bool = False):
        self.func = func
        self.grid = tuple(grid)
        self.target = target
        self.timing_only = timing_only
        functools.update_wrapper(self, func)

    def variant(self, *, func=None, grid=None, **directives) -> "Kernel":
        """A new kernel of this one's function (or `func`) on its grid (or `grid`), target and timing mode,
        keeping what this kernel asked of the compiler (its own directives: compile config, scheduling
        edges, ``@nki.compiler`` marks) with `directives` added. Every copy of a kernel is made here
        (kernel[grid], with_schedule, nki.jit(compile_config=...)(kernel), the grader's wrappers), so none
        drops them."""
        kernel = Kernel(self.func if func is None else func, self.grid if grid is None else grid, self.target,
                        self.timing_only)
        merged = {**_own_directives(self), **directives}
        if merged:
            kernel.nki_directives = merged
        return kernel

    def __getitem__(self, grid) -> "Kernel":
        from trnlab.nki.spmd import grid_entry
        grid = grid if isinstance(grid, tuple) else (grid,)
        return self.variant(grid=tuple(grid_entry(g) for g in grid))

    def with_schedule(self, edges) -> "Kernel":
        """The kernel with scheduling dependencies between named instructions: ``[("plus1", "recip")]``
        puts the instruction named "plus1" after the one named "recip" (`trnlab/nki/schedule.py`)."""
        from trnlab.nki.schedule import normalise
        return self.variant(schedule=normalise(edges))

    def __call__(self, *args, **kwargs):
        if launches.active() is not None:
            # a kernel called while tracing (from a kernel, or from a function being traced as one
            # program): inline it, its instructions in a region named after it (noted as an inlined
            # kernel's: the list schedule may interleave it with its caller, as AWS's compiler does)
            launches.active().__dict__.setdefault("inlined", set()).add(self.func.__name__)
            from trnlab.nki.compile_config import check_nested
            check_nested(getattr(launches.active(), "kernel_config", (None, None)),
                         (_directive(self, "compile_config"), _directive(self, "specialization_config")),
                         self.func.__name__)
            with region(self.func.__name__):
                if not self.grid:
                    return self.func(*args, **kwargs)
                return self._inline_grid(launches.active(), args, kwargs)
        return run(self, *args, **kwargs).outputs

    def _inline_grid(self, launch, args, kwargs):
        """`kernel[g0, g1](...)` called while tracing: every program of its grid, one after another
        in the caller's program, sharing their nl.shared_hbm outputs (as a launch on one core does);
        then the caller's own grid position again."""
        from trnlab.nki.spmd import cores_of
        if cores_of(self.grid) > 1:
            raise NKIError(f"{self!r} called inside another kernel or traced function spreads its grid over "
                           f"{cores_of(self.grid)} NeuronCores (nl.nc): launch it on its own (nki.run) instead")
        saved = launch.grid, launch.program_id, launch.shared_cursor, launch.shared_hbm
        launch.grid, launch.shared_hbm = self.grid, []
        result = None
        try:
            for point in _grid_points(self.grid):
                launch.program_id, launch.shared_cursor = point, 0
                result = self.func(*args, **kwargs)
                launch.flush()
        finally:
            launch.grid, launch.program_id, launch.shared_cursor, launch.shared_hbm = saved
        return result

    def __repr__(self) -> str:
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"nki.jit({self.func.__name__}){grid}"


def jit(func=None, *, target=None, platform_target=None, timing_only: bool = False, mode=None,
        compile_config=None, specialization_config=None, **kwargs):
    """Decorator making an NKI kernel: `@nki.jit` or `@nki.jit(target="trn1")`.

    `mode`, `platform_target` and the other options of AWS's jit are accepted; `platform_target`
    picks the preset like `target`. NKI 0.7's `compile_config=nki.compiler.CompileConfig(...)` and
    `specialization_config=nki.compiler.SpecializationConfig(...)` are honoured or refused option by
    option (`compile_config.py`).
    """
    from trnlab.nki.compile_config import check_jit_arguments
    check_jit_arguments(compile_config, specialization_config)

    def wrap(f):
        kernel = f if isinstance(f, Kernel) else Kernel(f, target=target or platform_target, timing_only=timing_only)
        if compile_config is None and specialization_config is None:
            return kernel
        # nki.jit(compile_config=...)(kernel) configures a copy; a new kernel of a function gets them itself
        return kernel.variant(compile_config=compile_config, specialization_config=specialization_config)
    return wrap(func) if func is not None else wrap


# -- tracing ------------------------------------------------------------------------------------------
_PROGRAMS = ProgramCache(256)          # (func, grid, target, signature, ...) -> Program


def trace(kernel, *args, target=None, grid=None, points=None, **kwargs):
    """The `Program` of `kernel` for these argument shapes and dtypes (traced once, then cached,
    like a compiled NEFF per input shape). `kernel` is an @nki.jit kernel or any Python function
    that calls kernels (they are inlined into one program, each in a region of its name).
    `points`: the grid points this program runs (default all; one core's share of an nl.nc grid)."""
    from trnlab.hardware import presets
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    grid = tuple(grid) if grid is not None else kernel.grid
    spec = presets.core_spec(target or kernel.target or default_target())
    points = None if points is None else tuple(tuple(p) for p in points)
    order, heuristic = _order_of(kernel)
    key = (kernel.func, grid, tuple(getattr(g, "cores", 1) for g in grid), points, spec.name, id(spec), order,
           DROP_PSUM_ZEROING, _directive(kernel, "schedule"), _directive(kernel, "compile_config"), config.get("spill"),
           config.get("psum_evacuation"), config.get("versions"), config.get("recompute"), heuristic,
           tuple(_signature(a) for a in args), tuple((k, _signature(v)) for k, v in sorted(kwargs.items())))
    program = _PROGRAMS.get(key)
    if program is not None:
        return program
    program = _trace(kernel, args, kwargs, spec, grid, points)
    if DROP_PSUM_ZEROING and not _directive(kernel, "skip_middle_end_transformations") and not program.loops:
        from trnlab.hardware.instruction_order import drop_zeroing_memsets
        program = drop_zeroing_memsets(program)
    if not program.no_reorder:
        from trnlab.hardware.instruction_order import default_for, scheduled
        if program.loops:                     # the list schedule keeps each loop's body (a region) whole
            from trnlab.hardware.dynamic_loops import scheduled_keeping_loops
            program = scheduled_keeping_loops(program, order or default_for(program))
        else:                                 # the heuristic chooses within the list schedule only
            chosen = order or default_for(program)
            program = scheduled(program, chosen, heuristic=heuristic if chosen == "list" else "asap")
    _PROGRAMS.put(key, program)
    return program


SCHEDULE = None        # the instruction order traced programs get (None: instruction_order.default_for(program))
DROP_PSUM_ZEROING = False   # drop the memsets of nl.zeros PSUM tiles a matmul overwrites (ASSUMED rule,
                            # schedule.zeroing_memsets; off by default: docs/programs.md, "Scheduling")


def schedule_of(kernel: Kernel) -> str | None:
    """The schedule `kernel`'s programs get: "program" if the kernel asks AWS's compiler to keep
    its order (@nki.compiler.skip_middle_end_transformations), else `SCHEDULE`; None: the default
    for the program's size (`trnlab.hardware.instruction_order.default_for`). (A kernel with a loop marked
    ``directives=ncc.no_reorder()`` keeps program order as a whole: the trace notes the directive,
    not which instructions it covers.)"""
    if _directive(kernel, "skip_middle_end_transformations"):
        return "program"
    return SCHEDULE


def _order_of(kernel: Kernel) -> tuple[str | None, str]:
    """(schedule, list-schedule heuristic) of `kernel`'s programs: what its CompileConfig asks for
    (scheduling=True: NKI orders the instructions), else `schedule_of(kernel)` with the
    `schedule_heuristic` switch's rule (TRNLAB_SCHEDULE_HEURISTIC, ASAP by default) where that is the list schedule."""
    from trnlab.nki.compile_config import flow
    chosen = flow(_directive(kernel, "compile_config"))
    if chosen.schedule is not None:
        return chosen.schedule, chosen.heuristic
    order = schedule_of(kernel)
    if order in (None, "list"):          # TRNLAB_SCHEDULE_HEURISTIC: the default list schedule's choice rule
        return order, config.get("schedule_heuristic")
    return order, "asap"


def _trace(kernel: Kernel, args, kwargs, spec, grid: tuple, points=None):
    from trnlab.nki import while_register
    from trnlab.nki.isa_registers import RegisterValueError
    rewritten: set = set()
    while True:
        try:
            return _trace_kernel(kernel, args, kwargs, spec, grid, points)
        except RegisterValueError as error:
            # `while reg:` on a run-time register: its function compiled again with the while as a
            # loop the device runs, and the kernel traced again (while_register.py)
            if not while_register.rewrite(error, rewritten):
                raise


def _trace_kernel(kernel: Kernel, args, kwargs, spec, grid: tuple, points=None):
    from trnlab.nki import loops
    if _directive(kernel, "schedule"):       # every iteration's named instructions (schedule.py)
        return _trace_once(kernel, args, kwargs, spec, grid, None, points)[0]
    # affine/sequential loops traced in a few iterations and the rest stamped (loops.py) when
    # config.fast(), else every iteration traced: the same program either way
    return loops.trace(lambda concrete: _trace_once(kernel, args, kwargs, spec, grid, concrete, points))


def _trace_once(kernel: Kernel, args, kwargs, spec, grid: tuple, concrete, points=None):
    """One trace: (program, loop tracer); `concrete` = loop sites to run concretely (None: all)."""
    from trnlab.hardware.fusion import allocate     # in program order, else loop-fused (fusion.py)
    from trnlab.hardware.trace import Recorder
    from trnlab.nki import loops
    recorder = Recorder(spec, name=kernel.func.__name__)
    launch = launches.Launch(core=recorder, grid=grid, timing_only=True)
    launch.loop_tracer = tracer = None if concrete is None else loops.LoopTracer(recorder, launch, concrete)
    launch.budget = runaway.Budget(recorder.program.instructions)

    sites = {}

    def where():
        """The kernel line of the instruction being recorded: the one its note names (a functional
        call is issued after its own line), else the line running now."""
        note = recorder.note
        site = sites.get(note)
        if site is None:
            site = launch.site
            if site is not None and site_note(site) != note:
                site = next((s for s, n in _error_notes.items() if n == note), site)
            sites[note] = site
        return None if site is None else (site[0].co_filename, site[1], site[0].co_name)
    recorder.where = where
    names = kernel.func.__code__.co_varnames
    with _gc.paused():            # a trace only creates objects that stay alive (hardware/_gc.py)
        return _run_trace(kernel, args, kwargs, spec, grid, recorder, launch, names, allocate, points), tracer


def _run_trace(kernel, args, kwargs, spec, grid, recorder, launch, names, allocate, points=None):
    from trnlab.nki import compile_config as _config
    compile_config = _directive(kernel, "compile_config")
    _config.check_before_trace(compile_config, kernel.func.__name__)
    launch.kernel_config = (compile_config, _directive(kernel, "specialization_config"))
    launches.push(launch)
    try:
        args = tuple(_trace_argument(a, names[i] if i < len(names) else f"arg{i}", launch)
                     for i, a in enumerate(args))
        # keyword arguments become inputs in sorted order, the order `run` passes their arrays in
        kwargs = {k: _trace_argument(kwargs[k], k, launch) for k in sorted(kwargs)}
        result = None
        for program_id in (_grid_points(grid) if points is None else points):
            launch.program_id = program_id
            launch.shared_cursor = 0
            result = kernel.func(*args, **kwargs)
            launch.flush()
        outputs = _output_structure(result, recorder)
    except RecursionError as error:
        raise runaway.recursion_error(error) from None   # at the line that recurs, not in contextlib
    except Exception as error:
        raise locate(error)
    finally:
        launches.pop()
    program = recorder.finish(outputs)
    if config.get("versions") and _config.flow(compile_config).split_reused:
        # address rotation of neuronx-cc's flow, or split_reused_buffers under NKI allocation: each whole
        # overwrite of a reused tile gets a new address (hardware/versions.py, compile_config.py)
        from trnlab.hardware.versions import split_versions
        program = split_versions(program)
    edges = _directive(kernel, "schedule")
    if edges:                                # kernel.with_schedule(...): order constraints (schedule.py)
        from trnlab.nki.schedule import resolve
        try:
            program.schedule_edges = resolve(edges, getattr(launch, "instruction_names", {}))
        except Exception as error:
            raise locate(error)
    dependencies = launch.__dict__.get("dependency_edges")
    if dependencies:                         # handle.depends_on(...) (instruction_handles.py)
        from trnlab.nki import instruction_handles
        try:
            pairs = instruction_handles.resolve(dependencies, program)
        except Exception as error:
            raise locate(error)
        program.schedule_edges = tuple(sorted(set(getattr(program, "schedule_edges", ())) | set(pairs)))
        edges = edges or pairs
    program.no_reorder = bool(getattr(launch, "no_reorder", False))   # a loop said ncc.no_reorder()
    program.allocation_mode = _config.flow(compile_config).allocation_mode   # AllocationMode (allocate.py)
    program.inlined_regions = frozenset(getattr(launch, "inlined", ()))  # regions of inlined kernels
    try:
        _config.check_after_trace(compile_config, program, kernel.func.__name__)
        if program.loops:                    # loops the device runs (hardware/dynamic_loops.py): tiles
            from trnlab.hardware.dynamic_loops import close_live_ranges   # shared with the code around a
            close_live_ranges(program)       # loop live over all of it (its back edge); not fused (fusion.py)
        # repeated computations dropped where the program then fits (hardware/recompute.py; a candidate)
        allocated = _without_recomputation(program, spec) if config.get("recompute") else None
        if allocated is None:
            allocated = (_allocate_without_fallback(program, spec)
                         if compile_config is not None and compile_config.surfaces_allocation_failure else
                         allocate(program, spec, fuse=not _directive(kernel, "skip_middle_end_transformations")))
    except Exception as error:
        raise locate(error)
    if edges and allocated is not program:
        raise NKIError("with_schedule / depends_on: this kernel's loops are fused to fit the memory "
                       "(hardware/fusion.py), which reorders its instructions; scheduling edges are not supported "
                       "on such kernels")
    return allocated


def _without_recomputation(program, spec):
    """The program without its repeated computations (hardware/recompute.py), allocated in the order written,
    if there were any and it then fits SBUF and PSUM without a fallback; else None (the program is allocated as
    traced: a compiler does not hoist under memory pressure)."""
    from trnlab.hardware.allocate import allocate as allocate_in_order
    from trnlab.hardware.errors import PSUMOverflowError, SBUFOverflowError
    from trnlab.hardware.recompute import eliminate_recomputation
    lean = eliminate_recomputation(program)
    if lean is program:
        return None
    try:
        return allocate_in_order(lean, spec)
    except (SBUFOverflowError, PSUMOverflowError):
        return None


def _allocate_without_fallback(program, spec):
    """CompileConfig(nki_alloc_fallback=False): the kernel's own allocation, in the order written; an
    SBUF/PSUM overflow is raised instead of trnlab's fallbacks (loop fusion, spilling)."""
    from trnlab.hardware.errors import PSUMOverflowError, SBUFOverflowError
    from trnlab.hardware.fusion import allocate_in_order
    try:
        return allocate_in_order(program, spec)
    except (SBUFOverflowError, PSUMOverflowError) as error:
        error.args = (f"{error.args[0] if error.args else error} (CompileConfig(nki_alloc_fallback=False): the "
                      f"allocation failure surfaces; trnlab's fallbacks — loop fusion, spilling — do not run)",
                      ) + tuple(error.args[1:])
        raise


def _own_directives(kernel) -> dict:
    """A copy of the directives set on `kernel` itself (not on the function it wraps)."""
    return dict(kernel.__dict__.get("nki_directives", {}))


def _directive(kernel: Kernel, name: str):
    """The value of an `nki.compiler` kernel directive (`@nki.compiler.skip_middle_end_transformations`
    above or below `@nki.jit`), or None."""
    return {**getattr(kernel.func, "nki_directives", {}), **getattr(kernel, "nki_directives", {})}.get(name)


@contextlib.contextmanager
def region(name: str):
    """Tag the instructions issued inside the block (while tracing) with a region name, so the
    profile can be broken down per region; regions nest ("layer0/attention")."""
    launch = launches.active()
    recorder = getattr(launch, "core", None) if launch is not None else None
    if recorder is None or not hasattr(recorder, "region"):
        yield
        return
    launch.flush()
    with recorder.region(name):
        yield
        launch.flush()


def run(kernel, *args, target=None, timing_only: bool | None = None, grid=None, device=None, core: int = 0,
        **kwargs) -> KernelRun:
    """Trace `kernel` (cached per shapes) and replay it on a simulated NeuronCore: by default a
    fresh one-core device of the target preset, or core `core` of `device`. Returns the outputs,
    the timeline and the profile."""
    from trnlab.hardware.device import Device
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    timing = kernel.timing_only if timing_only is None else timing_only
    if not timing and any(isinstance(a, ShapeDtype) for a in list(args) + list(kwargs.values())):
        name = next(n for n, a in zip(kernel.func.__code__.co_varnames, args) if isinstance(a, ShapeDtype)) \
            if any(isinstance(a, ShapeDtype) for a in args) else "?"
        raise NKIError(f"argument {name!r} is a ShapeDtype (no values): use it with timing_only=True")
    target = target or kernel.target
    if device is not None:
        target = device.spec
    from trnlab.nki import spmd
    grid = tuple(spmd.grid_entry(g) for g in grid) if grid is not None else kernel.grid
    if spmd.cores_of(grid) > 1:     # nl.nc / nl.spmd_dim axes: a program per core, launched together
        return spmd.run_on_cores(kernel, args, kwargs, target=target, timing=timing, grid=grid,
                                 device=device, core=core)
    program = trace(kernel, *args, target=target, grid=grid, **kwargs)
    if device is None:
        device = Device(target or default_target(), mode="timing" if timing else "full", cores=1)
    elif device.full == timing:
        raise NKIError(f"{device!r} runs in {device.mode!r} mode; timing_only={timing} asks for the other")
    as_torch = any(_is_torch(a) for a in list(args) + list(kwargs.values()))
    arrays = [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)] if _is_array(a)]
    arrays = [_to_numpy(a) if _is_torch(a) else (None if isinstance(a, ShapeDtype) else a) for a in arrays]
    try:
        launch = device.run(program, *arrays, core=core)
    except Exception as error:
        raise locate(error)
    outputs = _convert_outputs(launch.outputs, as_torch)
    return KernelRun(outputs=outputs, core=launch.core, timing_only=timing, program=program, launch=launch)


def _grid_points(grid: tuple) -> list[tuple]:
    if not grid:
        return [()]
    points = [()]
    for size in grid:
        points = [p + (i,) for p in points for i in range(size)]
    return points


# -- AWS's entry points ------------------------------------------------------------------------------
def simulate_kernel(kernel, *args, **kwargs):
    """nki.simulate_kernel(kernel, *args): run on the simulator and return the outputs. As on AWS's
    simulator, NumPy inputs the kernel wrote are updated in place ("Input arrays are updated in-place
    if the kernel modified the corresponding HBM tensors", NKI CPU Simulator guide, "Execution")."""
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    from trnlab.nki import spmd
    if kwargs.get("timing_only", kernel.timing_only) or kwargs.get("device") is not None \
            or spmd.cores_of(kernel.grid) > 1:
        return run(kernel, *args, **kwargs).outputs
    from trnlab.hardware.device import Device
    options = {k: kwargs.pop(k) for k in ("target", "timing_only", "grid", "core") if k in kwargs}
    device = Device(options.pop("target", None) or kernel.target or default_target(), mode="full", cores=1)
    names = kernel.func.__code__.co_varnames
    placed = []                                    # (device tensor, the caller's array)

    def place(value, name):
        if not isinstance(value, np.ndarray):
            return value
        tensor = device.tensor(value.astype(np.float32) if value.dtype == np.float64 else value, name=name)
        placed.append((tensor, value))
        return tensor
    args = tuple(place(a, names[i] if i < len(names) else f"arg{i}") for i, a in enumerate(args))
    kwargs = {k: place(v, k) for k, v in kwargs.items()}
    result = run(kernel, *args, device=device, **options, **kwargs)
    written = {a.buffer for ins in result.program.instructions for a in ins.writes()}
    by_tensor = {id(t): array for t, array in placed}
    inputs = [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)] if _is_array(a)]
    for (_, buffer), value in zip(result.program.inputs, inputs):
        array = by_tensor.get(id(value))
        if array is not None and buffer in written and array.dtype == value.dtype and array.flags.writeable:
            np.copyto(array, value.full.read())
    for tensor, _ in placed:
        device.free(tensor)
    return result.outputs


def simulate(kernel):
    """nki.simulate(kernel) -> a callable that runs the kernel on the simulator: NumPy in, NumPy
    out (torch in, torch out), as AWS's nki.simulate page says."""
    return lambda *args, **kwargs: simulate_kernel(kernel, *args, **kwargs)


class _CpuSimulated:
    """``nki.cpu_simulate(kernel)[lnc](**inputs)``, the call AWS's NKI Library harness makes in
    simulation mode (test/utils/simulation_setup.py): `lnc` is the logical NeuronCore config, 1 or 2
    physical cores per logical core; LNC2 runs one program per physical core, launched together
    (``kernel[nl.nc(2)]``: `nl.program_id(0)` is the core), as AWS's simulator runs two threads."""

    def __init__(self, kernel, lnc: int = 1):
        self.kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
        self.lnc = lnc

    def __getitem__(self, lnc) -> "_CpuSimulated":
        lnc = int(lnc)
        if lnc < 1:
            raise NKIError(f"nki.cpu_simulate(kernel)[lnc]: lnc is 1 or 2 cores per logical core, got {lnc}")
        return _CpuSimulated(self.kernel, lnc)

    def __call__(self, *args, **kwargs):
        kernel = self.kernel
        if self.lnc > 1:
            from trnlab.nki import language
            kernel = kernel[language.nc(self.lnc)]
        return simulate_kernel(kernel, *args, **kwargs)


def cpu_simulate(kernel) -> _CpuSimulated:
    """nki.cpu_simulate(kernel)[lnc](*args, **kwargs): run on the simulator, return the outputs."""
    return _CpuSimulated(kernel)


class _Latency:
    """Like AWS's `benchmark_result.nc_latency`: the simulation is deterministic, so every percentile
    is the one simulated latency (microseconds)."""

    def __init__(self, latency_us: float):
        self.latency_us = latency_us

    def get_latency_percentile(self, percentile: int = 50) -> float:
        return self.latency_us


@dataclass
class BenchmarkResult:
    nc_latency: _Latency
    run: KernelRun

    @property
    def latency_ns(self) -> float:
        return self.run.latency_ns

    @property
    def timeline(self):
        return self.run.timeline

    @property
    def profile(self):
        return self.run.profile()


class _Measured(Kernel):
    """A kernel wrapped by nki.benchmark / nki.profile: calling it runs and records the simulated time."""

    def __init__(self, kernel: Kernel, options: dict, kind: str):
        super().__init__(kernel.func, kernel.grid, options.get("target") or kernel.target,
                         options.get("timing_only", kernel.timing_only))
        if _own_directives(kernel):              # what the kernel asked of the compiler (compile_config, ...)
            self.nki_directives = _own_directives(kernel)
        self.options, self.kind = options, kind
        self.benchmark_result = None
        self.profile_result = None

    def __getitem__(self, grid):
        measured = _Measured(Kernel.__getitem__(self, grid), self.options, self.kind)
        measured._parent = self          # bench[grid](...) also fills bench.benchmark_result
        return measured

    def __call__(self, *args, **kwargs):
        if self.kind == "profile":
            _profile_paths(self.options)         # refuse before running, as AWS's does before compiling
        # shape-only arguments (`nt.tensor[[8192, 4096], nl.bfloat16]`: beta 1 benchmarks a kernel on
        # them, AWS's matmul tutorial among others) have no values to compute: the run is timing-only
        shapes_only = any(isinstance(a, ShapeDtype) for a in (*args, *kwargs.values()))
        result = run(self, *args, timing_only=True, **kwargs) if shapes_only else run(self, *args, **kwargs)
        self.benchmark_result = BenchmarkResult(_Latency(result.latency_us), result)
        if getattr(self, "_parent", None) is not None:
            self._parent.benchmark_result = self.benchmark_result
        if self.kind == "profile":
            self.profile_result = _write_profile(result, self.options)
            if getattr(self, "_parent", None) is not None:
                self._parent.profile_result = self.profile_result
        elif self.options.get("save_trace_name"):
            # nki.benchmark(save_trace_name=...) also saves the run's trace (AWS's unit tests check it)
            result.timeline.to_chrome_trace(self.options["save_trace_name"])
        if self.kind != "profile" and self.options.get("save_neff_name"):
            _save_program(result, self.options["save_neff_name"])
        return result.outputs


def _save_program(result: KernelRun, path: str) -> None:
    """save_neff_name: the run's program where AWS's tools write the compiled NEFF — trnlab's program
    JSON (`Program.save`) under the name asked; `python -m trnlab.nki profile` reads it. A launch
    over several cores saves core 0's program."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    result.program.save(path)


def _profile_paths(options: dict) -> tuple[str, str, str]:
    """(trace path, summary path, program path) of nki.profile's options. AWS's nki.profile:
    working_directory an absolute path, save_neff_name default 'file.neff', save_trace_name default
    'profile.ntff', overwrite default False (existing artifacts are not replaced). NTFF is Neuron's
    binary format: trnlab writes Chrome/Perfetto JSON under the same name with .json; the NEFF's name
    holds trnlab's program JSON (`_save_program`)."""
    directory = options.get("working_directory") or os.getcwd()
    if not os.path.isabs(directory):
        raise NKIError(f"nki.profile: working_directory must be an absolute path, got {directory!r}")
    trace_name = os.path.splitext(options.get("save_trace_name") or "profile.ntff")[0] + ".json"
    trace_path = os.path.join(directory, trace_name)
    summary_path = os.path.join(directory, os.path.splitext(trace_name)[0] + "_summary.json")
    program_path = os.path.join(directory, options.get("save_neff_name") or "file.neff")
    if not options.get("overwrite", False):
        existing = [p for p in (trace_path, summary_path, program_path) if os.path.exists(p)]
        if existing:
            raise FileExistsError(f"nki.profile: {existing[0]} exists and overwrite=False (AWS's default); "
                                  f"pass overwrite=True or another save_trace_name")
    return trace_path, summary_path, program_path


def _write_profile(result: KernelRun, options: dict) -> dict:
    trace_path, summary_path, program_path = _profile_paths(options)
    os.makedirs(os.path.dirname(trace_path), exist_ok=True)
    _save_program(result, program_path)
    if hasattr(result, "chrome_trace"):          # an SPMD launch over several cores: every core's rows
        result.chrome_trace(trace_path)
    else:
        result.timeline.to_chrome_trace(trace_path)
    profile = result.profile()
    summary = profile.as_dict()
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return {"trace": trace_path, "summary": summary_path, "neff": program_path, "profile": profile}


def _measuring(kind: str, kernel=None, **options):
    def wrap(k):
        return _Measured(k if isinstance(k, Kernel) else Kernel(k), options, kind)
    return wrap(kernel) if kernel is not None else wrap


def benchmark(kernel=None, **options):
    """@nki.benchmark(warmup=..., iters=..., save_neff_name=..., save_trace_name=..., target=...,
    timing_only=...): calling the kernel runs it once on the simulator (simulated time is
    deterministic: warmup and iters change nothing) and sets `kernel.benchmark_result`
    (`.nc_latency.get_latency_percentile(p)` in µs, `.timeline`, `.profile`); save_neff_name writes
    the run's program there (trnlab's program JSON: `python -m trnlab.nki profile FILE` prints
    neuron-profile's summary fields), save_trace_name the run's trace (Chrome/Perfetto JSON)."""
    return _measuring("benchmark", kernel, **options)


def profile(func=None, **options):
    """@nki.profile(working_directory=..., save_neff_name=..., save_trace_name=..., overwrite=False,
    profile_nth=1): run on the simulator, write the program, a Chrome / Perfetto trace and a profile
    summary JSON there, and set
    `kernel.profile_result`. As AWS's: working_directory is absolute, existing artifacts are kept
    unless overwrite=True (the simulation is deterministic, so profile_nth changes nothing)."""
    return _measuring("profile", func, **options)


def baremetal(kernel=None, **options):
    """nki.baremetal: there is no device here, so it runs on the simulator like nki.jit; with
    save_neff_name / save_trace_name it writes them as nki.benchmark does."""
    if options.get("save_neff_name") or options.get("save_trace_name"):
        return _measuring("benchmark", kernel, **options)
    return jit(kernel, **{k: v for k, v in options.items() if k in ("target", "timing_only")})


from trnlab.nki.multi_rank import multi_rank_run, multi_rank_simulate  # noqa: E402  (uses the names above)
