"""NKI's per-kernel compile configuration: `nki.compiler.CompileConfig`, `SpecializationConfig`, and the
enums its options take (`AddressRotation`, `Allocation`, `AllocationMode`, `SchedulingHeuristic`,
`OptLevel`), passed as ``@nki.jit(compile_config=CompileConfig(...),
specialization_config=SpecializationConfig(...))``.

The options are those of Neuron 2.33 (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/
nki.compiler.html) and of AWS's latest pages (dated 2026-11-13: "Deep dive: NKI compile configuration",
"Reference: NKI CompileConfig options", "How to tune a NKI kernel with CompileConfig", "Troubleshooting:
NKI compile configuration" and the generated pages of the enums). Two decisions shape a compiled kernel,
in AWS's words: where each tensor goes, and the order in which the engines run the instructions. By
default neuronx-cc makes both after NKI traces the kernel (``Allocation.COLORING``, "the current flow":
graph coloring after the trace); ``allocation=Allocation.LINEAR`` lets NKI allocate ("It assigns an
address to a tile at its first write and releases the address after its last read"), and
``scheduling=True`` in addition lets NKI order the instructions.

How trnlab reads each option (`flow(config)` says what a kernel gets):

| option | AWS | trnlab |
|---|---|---|
| ``allocation`` | COLORING (default): neuronx-cc allocates after the trace; LINEAR: NKI allocates, first write to last read | both honoured: COLORING (and no config) rotates the address of a reused tile (below); LINEAR keeps the kernel's storage as written |
| ``address_rotation`` | AUTO: addresses the kernel fixed keep them, the backend may re-place the rest; ENABLE: rotate every memloc; DISABLE: none | under COLORING, AUTO (the default) and ENABLE give each whole overwrite of a reused allocator-placed SBUF tile a new address (`hardware/versions.py`, ASSUMED: the re-placing "may" do); DISABLE keeps one address, so each reload waits for the previous readers; trnlab never moves an address a kernel fixed, so ENABLE on a kernel with fixed addresses is refused |
| ``split_reused_buffers`` | NKI allocation: a DMA load that waits for compute reading the same tensor, "as in a loop that reuses one tensor" | honoured under LINEAR: the same split as rotation under COLORING |
| ``scheduling`` | NKI orders the instructions; needs LINEAR | honoured: the list schedule (`hardware/list_schedule.py`) with the heuristic below, at any size |
| ``experimental_scheduling_heuristic`` | ASAP (default): the instruction that can start first; CRITICAL_PATH: the longest path to the outputs; DMA_PREFETCH: a DMA before a non-DMA; TRIVIAL: program order | all four honoured (ASAP is trnlab's list schedule; TRIVIAL its program order; CRITICAL_PATH and DMA_PREFETCH the list schedule's other choice rules, `list_schedule.py`); a program with loops the device runs keeps each loop body whole and gets ASAP |
| ``experimental_allocation_mode`` | RING: a fresh address per tile, freed memory reused after the allocation wraps around; FAST: nested lifetimes stacked, the rest best fit into freed memory; MAX_REUSE: always best fit | all three honoured (`hardware/allocate.py`, `Program.allocation_mode`): RING is trnlab's allocator (next fit from a cursor that wraps), MAX_REUSE best fit, FAST a tile nested in the live range of the tile placed last stacked directly above it, the rest best fit |
| ``opt_level`` | O0: every instruction on its default engine; O1 (default): the compiler picks each `tensor_copy`'s engine; O2: O1 plus prefetch_auto, dma_copy_elim, element_widening, ...; "The current flow is the same at every level" | O0, O1 accepted (trnlab runs a `tensor_copy` with no ``engine=`` on its default engine at both); O2 under LINEAR refused (it turns on optimizations trnlab does not model); any level under COLORING changes nothing, as AWS says |
| ``nki_alloc_fallback`` | on: when NKI's allocation fails, fall back to neuronx-cc's flow; off: surface the failure | honoured: on, trnlab's fallbacks run (loop fusion, then spilling if the ``spill`` switch is on: `hardware/fusion.py`); off, the SBUF/PSUM overflow of the kernel's own allocation is raised |
| ``prefetch_auto`` | a prefetch ring and slack band reserved in SBUF for DMA loads | False honoured; True refused: trnlab's allocator has no prefetch ring |
| ``dead_code_elim``, ``remove_unused_instructions``, ``remove_overwritten_writes``, ``tensor_copy_elim``, ``dma_copy_elim``, ``element_widening``, ``engine_balancing``, ``register_load_reuse``, ``sbuf_allocation_fallback`` | optimizations (and a fallback) of NKI allocation / the backend | False honoured (trnlab runs every traced instruction as written); True refused by name |
| ``barrier_check`` | the LNC core barrier checker at compile time | False honoured; True refused: no such compile-time checker |
| ``non_ssa_legalization`` | the backend's non-SSA legalization pass | accepted either way: trnlab's buffers are memory written in place, the behaviour the pass preserves |
| ``allow_nested_config_override`` (SpecializationConfig) | a nested ``@nki.jit`` kernel whose config disagrees: warn and inline under the top-level config instead of raising | honoured (`check_nested`) |

Errors, as AWS's troubleshooting page words them, raised when the CompileConfig is made: a wrong type is a
TypeError ("address_rotation must be an nki.compiler.AddressRotation", "<option> must be an
nki.compiler.AllocationMode or None"); ``scheduling=True`` without LINEAR a ValueError ("scheduling=True
needs an allocation; set allocation=Allocation.LINEAR as well."); an option that acts only when NKI
allocates, set under COLORING, a ValueError ("<option> acts only when NKI allocates; it cannot be set with
allocation=Allocation.COLORING."), and one that acts only when NKI schedules, set without scheduling, a
ValueError ("<option> acts only when NKI schedules; set scheduling=True as well."). Which options count
as acting only under NKI allocation is ASSUMED from the tuning page's table (its "Needs LINEAR" column)
and the option's description; an option set to False (off, its default) is accepted in either flow. An
option no release has raises TypeError naming the options there are.
"""
from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, fields

from trnlab.nki.errors import NKIError


class UnsupportedCompileOption(NKIError):
    """A CompileConfig option value whose effect trnlab's allocator and schedules do not model."""


class NestedConfigError(NKIError):
    """A kernel called from inside another kernel sets a compile configuration that disagrees with the
    top-level kernel's (SpecializationConfig(allow_nested_config_override=True) allows it, with a warning)."""


class AddressRotation(enum.Enum):
    """nki.compiler.AddressRotation: whether the backend may rotate a memloc's address."""
    AUTO = "auto"
    ENABLE = "enable"
    DISABLE = "disable"


class Allocation(enum.Enum):
    """nki.compiler.Allocation: who assigns SBUF, PSUM and HBM addresses (CompileConfig.allocation)."""
    COLORING = "coloring"     # the current flow: neuronx-cc, graph coloring after the trace
    LINEAR = "linear"         # the new flow: NKI, linear scan, first write to last read


class AllocationMode(enum.Enum):
    """nki.compiler.AllocationMode: how NKI allocation picks each tile's address."""
    RING = "ring"             # a fresh address per tile; freed memory reused after wrapping around
    FAST = "fast"             # nested lifetimes stacked, the rest best fit into freed memory
    MAX_REUSE = "max_reuse"   # always best fit into freed memory


class SchedulingHeuristic(enum.Enum):
    """nki.compiler.SchedulingHeuristic: which ready instruction NKI scheduling picks next."""
    ASAP = "asap"                     # the one that can start first (the default)
    CRITICAL_PATH = "critical_path"   # the one on the longest path to the kernel's outputs
    DMA_PREFETCH = "dma_prefetch"     # a DMA before an instruction that is not a DMA
    TRIVIAL = "trivial"               # the kernel's program order


class OptLevel(enum.Enum):
    """nki.compiler.OptLevel: how many optimizations the new flow applies (O1 the default)."""
    O0 = 0
    O1 = 1
    O2 = 2


_UNSET = None      # an option left out: the compiler's default

_ENUMS = {"address_rotation": AddressRotation, "allocation": Allocation, "opt_level": OptLevel,
          "experimental_allocation_mode": AllocationMode, "experimental_scheduling_heuristic": SchedulingHeuristic}
# options that act only when NKI allocates (allocation=LINEAR) or only when NKI schedules (scheduling=True)
_NKI_ALLOCATES = ("experimental_allocation_mode", "split_reused_buffers", "tensor_copy_elim", "dma_copy_elim",
                  "element_widening", "engine_balancing", "register_load_reuse", "remove_unused_instructions",
                  "remove_overwritten_writes", "sbuf_allocation_fallback")
_NKI_SCHEDULES = ("experimental_scheduling_heuristic",)
# optimizations trnlab does not model: False honoured (every instruction runs as written), True refused
_NOT_MODELLED = {
    "prefetch_auto": "trnlab's allocator reserves no DMA prefetch ring in SBUF",
    "dead_code_elim": "trnlab has no dead-code elimination: every traced instruction runs",
    "barrier_check": "trnlab has no compile-time LNC core barrier checker",
    "remove_unused_instructions": "trnlab runs every traced instruction",
    "remove_overwritten_writes": "trnlab runs every traced instruction, overwritten or not",
    "tensor_copy_elim": "trnlab does not remove tensor copies",
    "dma_copy_elim": "trnlab does not remove DMA copies",
    "element_widening": "trnlab does not widen elements",
    "engine_balancing": "trnlab runs each instruction on the engine the kernel (or its default) names",
    "register_load_reuse": "trnlab does not reuse register loads",
    "sbuf_allocation_fallback": "trnlab's fallbacks are those nki_alloc_fallback names",
}


@dataclass(frozen=True)
class CompileConfig:
    """nki.compiler.CompileConfig(...): per-kernel options that impact downstream compiler behaviour."""
    address_rotation: AddressRotation | None = _UNSET
    non_ssa_legalization: bool | None = _UNSET
    dead_code_elim: bool | None = _UNSET
    barrier_check: bool | None = _UNSET
    prefetch_auto: bool | None = _UNSET
    nki_alloc_fallback: bool | None = _UNSET
    allocation: Allocation | None = _UNSET
    scheduling: bool | None = _UNSET
    opt_level: OptLevel | None = _UNSET
    experimental_allocation_mode: AllocationMode | None = _UNSET
    experimental_scheduling_heuristic: SchedulingHeuristic | None = _UNSET
    split_reused_buffers: bool | None = _UNSET
    tensor_copy_elim: bool | None = _UNSET
    dma_copy_elim: bool | None = _UNSET
    element_widening: bool | None = _UNSET
    engine_balancing: bool | None = _UNSET
    register_load_reuse: bool | None = _UNSET
    remove_unused_instructions: bool | None = _UNSET
    remove_overwritten_writes: bool | None = _UNSET
    sbuf_allocation_fallback: bool | None = _UNSET

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            kind = _ENUMS.get(f.name)
            if kind is AddressRotation and value is not None and not isinstance(value, kind):
                raise TypeError(f"address_rotation must be an nki.compiler.AddressRotation, got {value!r}")
            if kind is not None and value is not None and not isinstance(value, kind):
                raise TypeError(f"{f.name} must be an nki.compiler.{kind.__name__} or None, got {value!r}")
            if kind is None and value is not None and not isinstance(value, bool):
                raise TypeError(f"CompileConfig.{f.name} is a bool, got {value!r}")
        if self.scheduling:
            if self.allocation is None:
                raise ValueError("scheduling=True needs an allocation; set allocation=Allocation.LINEAR as well.")
            if self.allocation is not Allocation.LINEAR:
                raise ValueError(f"scheduling=True needs allocation=Allocation.LINEAR, got allocation={self.allocation}")
        if self.allocation is not Allocation.LINEAR:
            for name in _NKI_ALLOCATES:
                if getattr(self, name) not in (None, False):
                    raise ValueError(f"{name} acts only when NKI allocates; it cannot be set with "
                                     f"allocation=Allocation.COLORING.")
        if not self.scheduling:
            for name in _NKI_SCHEDULES:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} acts only when NKI schedules; set scheduling=True as well.")

    def set_options(self) -> dict:
        """The options the kernel set (name -> value), in the order of the class."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def refusals(self) -> list[str]:
        """Why trnlab cannot honour this configuration, one sentence per option (none: it can)."""
        refused = []
        for name, why in _NOT_MODELLED.items():
            if getattr(self, name):
                refused.append(f"CompileConfig({name}=True): {why}; leave {name} out or set it False")
        if self.opt_level is OptLevel.O2 and self.allocation is Allocation.LINEAR:
            refused.append("CompileConfig(opt_level=OptLevel.O2): O2 turns on optimizations trnlab does not model "
                           "(prefetch_auto, dma_copy_elim, element_widening, ...); use OptLevel.O1 and the "
                           "options trnlab honours (split_reused_buffers, scheduling)")
        return refused

    @property
    def surfaces_allocation_failure(self) -> bool:
        """nki_alloc_fallback=False: an SBUF/PSUM overflow is raised, trnlab's fallbacks do not run."""
        return self.nki_alloc_fallback is False


@dataclass(frozen=True)
class Flow:
    """What a kernel's configuration asks of trnlab's compiler: `split_reused` — each whole overwrite of a
    reused allocator-placed SBUF tile starts a new tile (`hardware/versions.py`); `schedule` — None (the
    default for the program's size), "program" or "list"; `heuristic` — the list schedule's choice rule;
    `allocation_mode` — how the allocator picks a tile's bytes (`Program.allocation_mode`)."""
    split_reused: bool = True
    schedule: str | None = None
    heuristic: str = "asap"
    allocation_mode: str = "ring"


def flow(config: CompileConfig | None) -> Flow:
    """The allocation and scheduling `config` selects (no config: neuronx-cc's flow, COLORING with address
    rotation AUTO)."""
    if config is None:
        return Flow()
    mode = (config.experimental_allocation_mode or AllocationMode.RING).value
    if config.allocation is Allocation.LINEAR:    # NKI placed the tiles: only an explicit split moves them
        split = bool(config.split_reused_buffers) or config.address_rotation is AddressRotation.ENABLE
    else:
        split = config.address_rotation is not AddressRotation.DISABLE
    if not config.scheduling:
        return Flow(split_reused=split, allocation_mode=mode)
    heuristic = config.experimental_scheduling_heuristic or SchedulingHeuristic.ASAP
    if heuristic is SchedulingHeuristic.TRIVIAL:
        return Flow(split_reused=split, schedule="program", allocation_mode=mode)
    return Flow(split_reused=split, schedule="list", heuristic=heuristic.value, allocation_mode=mode)


def _with_class_names(cls):
    # an option no release has: AWS's own TypeError text names the keyword; trnlab adds the options there are
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if args:
            raise TypeError(f"{cls.__name__} takes keyword arguments only ({', '.join(sorted(known))})")
        if unknown:
            raise TypeError(f"{cls.__name__} has no option {', '.join(map(repr, unknown))}; NKI (Neuron 2.33 and "
                            f"AWS's pages of 2026-11-13) has: {', '.join(f.name for f in fields(cls))}")
        init(self, **kwargs)
    cls.__init__ = __init__
    return cls


CompileConfig = _with_class_names(CompileConfig)


@_with_class_names
@dataclass(frozen=True)
class SpecializationConfig:
    """nki.compiler.SpecializationConfig(...): per-kernel options of the specialization phase (tracing)."""
    allow_nested_config_override: bool = False

    def __post_init__(self):
        if not isinstance(self.allow_nested_config_override, bool):
            raise TypeError(f"SpecializationConfig.allow_nested_config_override is a bool, "
                            f"got {self.allow_nested_config_override!r}")


def check_jit_arguments(compile_config, specialization_config) -> None:
    """nki.jit's compile_config / specialization_config are the typed objects (TypeError otherwise)."""
    if compile_config is not None and not isinstance(compile_config, CompileConfig):
        raise TypeError(f"nki.jit(compile_config=...) takes an nki.compiler.CompileConfig, got {compile_config!r}")
    if specialization_config is not None and not isinstance(specialization_config, SpecializationConfig):
        raise TypeError(f"nki.jit(specialization_config=...) takes an nki.compiler.SpecializationConfig, "
                        f"got {specialization_config!r}")


def check_before_trace(compile_config: CompileConfig | None, kernel_name: str) -> None:
    """Refuse, naming the option, a configuration trnlab cannot honour."""
    if compile_config is None:
        return
    refused = compile_config.refusals()
    if refused:
        raise UnsupportedCompileOption(f"kernel {kernel_name!r}: " + "; ".join(refused))


def check_after_trace(compile_config: CompileConfig | None, program, kernel_name: str) -> None:
    """address_rotation=ENABLE on a kernel that fixes addresses: trnlab keeps every fixed address."""
    if compile_config is None or compile_config.address_rotation is not AddressRotation.ENABLE:
        return
    fixed = [b.name for b in program.buffers if getattr(b, "placement", None) is not None]
    if fixed:
        raise UnsupportedCompileOption(
            f"kernel {kernel_name!r}: CompileConfig(address_rotation=AddressRotation.ENABLE) would let the backend "
            f"re-place the addresses the kernel fixed ({', '.join(fixed[:4])}{', ...' if len(fixed) > 4 else ''}); "
            f"trnlab keeps every fixed address — use AddressRotation.AUTO or DISABLE")


def check_nested(outer: tuple, inner: tuple, inner_name: str) -> None:
    """A kernel called while another is traced: its (compile_config, specialization_config) must agree with
    the top-level kernel's, unless the top-level kernel allows overrides (then a warning; the nested kernel
    is inlined under the top-level configuration)."""
    outer_compile, outer_special = outer
    inner_compile, _ = inner
    if inner_compile is None or inner_compile == outer_compile:
        return
    message = (f"kernel {inner_name!r} is called from inside another kernel but sets compile config "
               f"{inner_compile.set_options()}, the top-level kernel's is "
               f"{outer_compile.set_options() if outer_compile is not None else 'the default'}")
    if outer_special is not None and outer_special.allow_nested_config_override:
        warnings.warn(message + "; inlined under the top-level kernel's config "
                      "(SpecializationConfig(allow_nested_config_override=True))", stacklevel=3)
        return
    raise NestedConfigError(message + "; give both the same config, or set SpecializationConfig("
                            "allow_nested_config_override=True) on the top-level kernel")
