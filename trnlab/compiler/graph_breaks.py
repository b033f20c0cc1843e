"""Graph breaks made visible: when Dynamo hands the "trnlab" backend no graph or several, say so once.

`torch.compile` falls back to eager PyTorch silently where Dynamo cannot trace the Python: an
`nn.GRU`/`nn.LSTM` (the whole frame runs in eager, the backend is never called), data-dependent control
flow (`if x.sum() > 0:`, `.item()`: the model is cut into several graphs, the parts between them run on
the host CPU). Both mean that part of the model is not on the simulated chip. Dynamo's start/end
compile callbacks bracket each frame it compiles; at the end of a frame compiled for "trnlab" this
module compares Dynamo's counters of unsupported constructs and graph breaks with those at the start,
and the graphs the backend received, and warns once per reason with the line Dynamo stopped at (read from Dynamo's own graph-break log
records while the frame compiles), or the frame's first line if it logged none.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import warnings

NAME = "trnlab"
_state = {"graphs": 0, "before": None, "seen": set()}


class GraphBreakWarning(UserWarning):
    """Part of a model compiled with backend="trnlab" runs in eager PyTorch on the host, not on the chip."""


def _counts() -> dict:
    from torch._dynamo.utils import counters
    return {**{("unsupported", k): v for k, v in counters["unimplemented"].items()},
            **{("graph break", k): v for k, v in counters["graph_break"].items()}}


def _compiling_frame():
    """(backend name, code object) of the frame Dynamo is compiling, from its `_compile` stack frame."""
    f = sys._getframe()
    while f is not None:
        if "compiler_fn" in f.f_locals:
            fn = f.f_locals["compiler_fn"]
            return getattr(fn, "compiler_name", getattr(fn, "_compiler_name", "")), f.f_locals.get("code")
        f = f.f_back
    return "", None


def graph_received() -> None:
    """The backend calls this for every graph Dynamo hands it."""
    _state["graphs"] += 1


class _Lines(logging.Handler):
    """Collects the user's `File "...", line N` from Dynamo's own graph-break log records."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list = []

    def emit(self, record) -> None:
        try:
            text = record.getMessage()
        except Exception:                    # a record we cannot format is not ours to explain
            return
        for path, line in re.findall(r'File "([^"]+)", line (\d+)', text):
            if f"{os.sep}torch{os.sep}" not in path and "site-packages" not in path:
                self.lines.append(f"{os.path.basename(path)}:{line}")


def _start(*args, **kwargs) -> None:
    _state["graphs"], _state["before"] = 0, _counts()
    _stop_listening()
    _state["lines"] = _Lines()
    logging.getLogger("torch._dynamo").addHandler(_state["lines"])


def _stop_listening() -> list:
    handler = _state.pop("lines", None)
    if handler is None:
        return []
    logging.getLogger("torch._dynamo").removeHandler(handler)
    return handler.lines


def _end(*args, **kwargs) -> None:
    lines = _stop_listening()
    backend, code = _compiling_frame()
    if backend != NAME or _state["before"] is None:
        return
    before, after = _state["before"], _counts()
    reasons = [(kind, text) for (kind, text), n in after.items() if n > before.get((kind, text), 0)]
    where = f"{code.co_filename.split('/')[-1]}:{code.co_firstlineno} ({code.co_name})" if code else "?"
    if lines:                                  # the line Dynamo stopped at, from its own log
        where = f"{lines[-1]} (in {code.co_name if code else '?'})"
    graphs = _state["graphs"]
    for kind, text in reasons:
        reason = text.strip().splitlines()[0]
        key = (where, reason)
        if key in _state["seen"]:
            continue
        _state["seen"].add(key)
        what = ("no graph: this code runs in eager PyTorch on the host CPU, not on the simulated chip"
                if graphs == 0 else f"{graphs} graph(s): the code between them runs in eager PyTorch on the host")
        warnings.warn(GraphBreakWarning(f"torch.compile(backend='trnlab'): Dynamo handed the backend {what}. "
                                        f"{kind.capitalize()} in {where}: {reason}"), stacklevel=2)


def install() -> None:
    """Register the callbacks (trnlab.compiler.dynamo.register calls it; again after torch._dynamo.reset())."""
    try:
        from torch._dynamo.callback import callback_handler, on_compile_end, on_compile_start
    except ImportError:                       # an older torch: no callbacks, no warning
        return
    if _start not in callback_handler.start_callbacks:      # torch._dynamo.reset() clears them
        on_compile_start(_start)
        on_compile_end(_end)
