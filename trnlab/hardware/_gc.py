"""Pause Python's cyclic garbage collector while a program is traced, resolved or replayed.

Tracing and replaying create hundreds of thousands of small objects (instructions, records) that
all stay alive until the program or timeline is done, so a collection frees nothing — but CPython
triggers one every few hundred allocations and its older generations rescan the whole growing
heap: on the 8192³ tiled matmul that was a quarter of the trace's time and a third of the replay's.
Reference counting still frees everything that is not in a cycle; the collector runs again after.
"""
from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused():
    """No cyclic collection inside the block (nested and concurrent blocks are fine)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
