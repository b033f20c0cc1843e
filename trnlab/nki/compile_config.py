"""NKI 0.7's per-kernel compile configuration: `nki.compiler.CompileConfig`, `SpecializationConfig`,
`AddressRotation`, passed as ``@nki.jit(compile_config=CompileConfig(...),
specialization_config=SpecializationConfig(...))``.

The options are those of Neuron 2.33 (awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/
nki.compiler.html, its generated class pages and the nki.jit page). What each one does in trnlab:

| option | AWS | trnlab |
|---|---|---|
| ``address_rotation`` | AUTO: addresses the kernel fixed keep them, the backend may re-place the rest; ENABLE: rotate every memloc; DISABLE: none | AUTO and DISABLE honoured: trnlab never moves an address a kernel fixed (``ncc.sbuf.mod_alloc`` ...) and places every other tile once; ENABLE on a kernel with fixed addresses refused (`UnsupportedCompileOption`) |
| ``nki_alloc_fallback`` | on: when NKI's allocation fails, fall back to neuronx-cc's flow; off: surface the failure (an SBUF/PSUM out-of-memory) | honoured: on, trnlab's fallbacks run (loop fusion, then spilling if the ``spill`` switch is on: `hardware/fusion.py`); off, the SBUF/PSUM overflow of the kernel's own allocation is raised |
| ``prefetch_auto`` | a prefetch ring and slack band reserved in SBUF for DMA loads | False honoured; True refused: trnlab's allocator has no prefetch ring |
| ``dead_code_elim`` | the kernel's memlocs eligible for backend dead-code elimination | False honoured (trnlab runs every traced instruction); True refused: no dead-code elimination |
| ``barrier_check`` | the LNC core barrier checker at compile time | False honoured; True refused: no such compile-time checker |
| ``non_ssa_legalization`` | the backend's non-SSA legalization pass | accepted either way: trnlab's buffers are memory written in place, the behaviour the pass preserves |
| ``allow_nested_config_override`` (SpecializationConfig) | a nested ``@nki.jit`` kernel whose config disagrees: warn and inline under the top-level config instead of raising | honoured (`check_nested`) |

A value left out is the compiler's default: nothing changes. A wrong type raises TypeError, as AWS's
configuration errors do ("TypeError: address_rotation must be an nki.compiler.AddressRotation",
Troubleshooting: NKI compile configuration); an option NKI 0.7 does not have raises TypeError naming the
options it has.
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


_UNSET = None      # an option left out: the compiler's default


@dataclass(frozen=True)
class CompileConfig:
    """nki.compiler.CompileConfig(...): per-kernel options that impact downstream compiler behaviour."""
    address_rotation: AddressRotation | None = _UNSET
    non_ssa_legalization: bool | None = _UNSET
    dead_code_elim: bool | None = _UNSET
    barrier_check: bool | None = _UNSET
    prefetch_auto: bool | None = _UNSET
    nki_alloc_fallback: bool | None = _UNSET

    def __post_init__(self):
        if self.address_rotation is not None and not isinstance(self.address_rotation, AddressRotation):
            raise TypeError(f"address_rotation must be an nki.compiler.AddressRotation, got {self.address_rotation!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "address_rotation" and value is not None and not isinstance(value, bool):
                raise TypeError(f"CompileConfig.{f.name} is a bool, got {value!r}")

    def set_options(self) -> dict:
        """The options the kernel set (name -> value), in the order of the class."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def refusals(self) -> list[str]:
        """Why trnlab cannot honour this configuration, one sentence per option (none: it can)."""
        refused = []
        for name, why in (("prefetch_auto", "trnlab's allocator reserves no DMA prefetch ring in SBUF"),
                          ("dead_code_elim", "trnlab has no dead-code elimination: every traced instruction runs"),
                          ("barrier_check", "trnlab has no compile-time LNC core barrier checker")):
            if getattr(self, name):
                refused.append(f"CompileConfig({name}=True): {why}; leave {name} out or set it False")
        return refused

    @property
    def surfaces_allocation_failure(self) -> bool:
        """nki_alloc_fallback=False: an SBUF/PSUM overflow is raised, trnlab's fallbacks do not run."""
        return self.nki_alloc_fallback is False


def _with_class_names(cls):
    # CompileConfig(opt_level=...) and the other options of later releases: AWS's own TypeError text names
    # the keyword; trnlab adds the options NKI 0.7 has
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if args:
            raise TypeError(f"{cls.__name__} takes keyword arguments only ({', '.join(sorted(known))})")
        if unknown:
            raise TypeError(f"{cls.__name__} has no option {', '.join(map(repr, unknown))}; NKI 0.7 (Neuron 2.33) "
                            f"has: {', '.join(f.name for f in fields(cls))}")
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
