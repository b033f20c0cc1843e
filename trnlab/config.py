"""The one registry of trnlab's switches and environment variables.

Every behaviour a user can switch lives here, with its environment variable, its default and what it
does; no other module reads ``os.environ`` for a trnlab setting. A switch is read each time it is
asked for (never frozen at import), so a test or a notebook can change it between runs, and
`override` changes it for one block of code only:

    >>> from trnlab import config
    >>> config.get("fast")                  # the fast paths (on unless TRNLAB_FAST=0)
    True
    >>> with config.override(fast=False):   # the reference simulator alone, for this block
    ...     ...

`python -m trnlab config` prints the table; docs/architecture.md lists it too.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Switch:
    name: str                       # the name used in code: config.get("fast")
    env: str                        # the environment variable that sets it
    default: Any
    parse: Callable[[str], Any]     # environment text -> value
    doc: str                        # one line: what it changes


def _flag(text: str) -> bool:
    return text.strip().lower() not in ("", "0", "false", "no", "off")


def _text(text: str) -> str:
    return text


SWITCHES: dict[str, Switch] = {s.name: s for s in (
    Switch("fast", "TRNLAB_FAST", True, _flag,
           "the fast paths beside the reference simulator (loop stamping, compiled replay, values "
           "plans, worker-thread products, pooled buffers, collector pauses, BLAS thread switching); "
           "0 runs the reference alone: the same numbers and times, slower"),
    Switch("check_loops", "TRNLAB_CHECK_LOOPS", False, _flag,
           "trace every stamped loop concretely as well, and fail if the two traces differ"),
    Switch("blas_threads", "TRNLAB_BLAS_THREADS", "single", _text,
           "'single': full mode runs its matrix products on one BLAS thread each, in parallel Python "
           "threads; 'default': leave BLAS's own threading alone"),
    Switch("trace_instructions", "TRNLAB_TRACE_INSTRUCTIONS", 2_000_000, int,
           "the most instructions one kernel trace may record; more raises TraceBudgetExceeded at the "
           "kernel line (trnlab/nki/runaway.py)"),
    Switch("cache", "TRNLAB_CACHE", "", _text,
           "the folder of compiled serving artifacts (default ~/.cache/trnlab)"),
    Switch("spill", "TRNLAB_SPILL", False, _flag,
           "SBUF tiles that do not fit are spilled to HBM (hardware/spill.py, ASSUMED) instead of an "
           "SBUFOverflowError; the profile counts the spilled bytes"),
    Switch("versions", "TRNLAB_VERSIONS", True, _flag,
           "each whole overwrite of a reused SBUF tile gets a new address where the kernel's compile "
           "configuration asks for it (neuronx-cc's flow with address rotation, or split_reused_buffers: "
           "nki/compile_config.py, hardware/versions.py); 0 keeps every kernel's storage as written"),
    Switch("recompute", "TRNLAB_RECOMPUTE", False, _flag,
           "an instruction computing again what an earlier one computed from unchanged inputs is dropped and "
           "its readers read the earlier result, where the program still fits SBUF (hardware/recompute.py, "
           "ASSUMED: a compiler's loop-invariant code motion); a calibration candidate, off by default"),
    Switch("schedule_heuristic", "TRNLAB_SCHEDULE_HEURISTIC", "asap", _text,
           "the list schedule's choice among ready instructions for kernels whose compile configuration "
           "does not name one: 'asap' (the default), 'critical_path' or 'dma_prefetch' "
           "(hardware/list_schedule.py, AWS's SchedulingHeuristic)"),
    Switch("psum_evacuation", "TRNLAB_PSUM_EVACUATION", False, _flag,
           "PSUM accumulators that do not fit in the order written are copied out right after their last "
           "write (hardware/psum_evacuation.py, ASSUMED) instead of a PSUMOverflowError"),
    Switch("garbage_stores", "TRNLAB_GARBAGE_STORES", False, _flag,
           "a DMA storing garbage into HBM leaves it undefined there (a later store defines it; reading an "
           "output that still holds it raises) instead of an UninitializedReadError at the store"),
    Switch("nki_force", "TRNLAB_NKI_FORCE", False, _flag,
           "zero-edit runs (trnlab.nki.zero_edit) serve AWS's nki / neuronxcc module names even where a "
           "real installation of them is importable"),
    Switch("platform_target", "NEURON_PLATFORM_TARGET_OVERRIDE", "", _text,
           "AWS's variable: the target of NKI kernels given none (trn1|gen2, trn2|gen3, trn3|gen4; "
           "unset: trn2)"),
    Switch("nc_version", "NKI_NC_VERSION", "", _text,
           "set by AWS's NKI Library harness before each simulated kernel (gen2|gen3|gen4); "
           "wins over NEURON_PLATFORM_TARGET_OVERRIDE"),
)}

# Overrides are process-wide, not per thread: a run's worker threads must see the switches of the
# run that started them.
_stack: list[dict] = []
_lock = threading.Lock()


def _overrides() -> list[dict]:
    return _stack


def get(name: str) -> Any:
    """The switch's value now: an `override` in force on this thread, else its environment
    variable, else its default."""
    switch = SWITCHES.get(name)
    if switch is None:
        raise KeyError(f"no trnlab switch named {name!r}; the switches are {', '.join(SWITCHES)}")
    for layer in reversed(_overrides()):
        if name in layer:
            return layer[name]
    text = os.environ.get(switch.env)
    return switch.default if text is None else switch.parse(text)


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Set switches for the block; the previous values come back after it."""
    for name in values:
        get(name)                                   # unknown names fail here, before the block
    with _lock:
        _stack.append(values)
    try:
        yield
    finally:
        with _lock:
            _stack.remove(values)


def fast() -> bool:
    """Whether the fast paths run (`config.get("fast")`)."""
    return bool(get("fast"))


def table() -> str:
    """The registry as a text table: switch, variable, default, current value, what it does."""
    rows = [("switch", "variable", "default", "now", "what it does")]
    for s in SWITCHES.values():
        rows.append((s.name, s.env, repr(s.default), repr(get(s.name)), s.doc))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)
