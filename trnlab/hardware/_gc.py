"""Pause Python's cyclic garbage collector while a program is traced, resolved or replayed.

Fast path (`trnlab.config.fast()`; with it off `paused()` does nothing). It changes the user's
process only for the block: the collector is enabled again when the outermost block ends, by an
exception too (tests/test_fast_paths.py), and collects everything as before.

Tracing and replaying create hundreds of thousands of small objects (instructions, records) that
all stay alive until the program or timeline is done, so a collection frees nothing — but CPython
triggers one every few hundred allocations and its older generations rescan the whole growing
heap: on the 8192³ tiled matmul that was a quarter of the trace's time and a third of the replay's.
Reference counting still frees everything that is not in a cycle.

When the block ends, the objects it created are still in the youngest generation, and the first
allocation afterwards would trigger a collection of that generation: a scan of every one of them
(0.3 CPU s after the 8192³ trace) that frees nothing. Instead they are moved as they are to the
oldest generation (`gc.freeze()` then `gc.unfreeze()` on the spot: two list splices, no object
visited), then the collector runs again. Nothing is exempt from collection — `gc.freeze` alone
would be unsafe in a library (a cycle among frozen objects, or the caller's, would never be
collected); here garbage cycles made during the block, or by other threads, are only collected
later, by the next full collection, which CPython schedules by its own rule (when the survivors
of younger collections have grown by a quarter of the oldest generation). A process that froze
objects itself keeps them frozen: then nothing is moved.
"""
from __future__ import annotations

import contextlib
import gc
import threading

from .. import config

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused():
    """No cyclic collection inside the block (nested and concurrent blocks are fine); its objects
    join the oldest generation afterwards without being scanned. Only on the fast path."""
    global _depth, _was_enabled
    if not config.fast():
        yield
        return
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
                promote_to_oldest()
                gc.enable()


def promote_to_oldest() -> None:
    """Move every object the collector tracks into its oldest generation, visiting none — unless
    the process froze objects itself (`gc.freeze`, e.g. before forking workers): those must stay
    frozen, so then nothing is moved and the usual collection runs."""
    if gc.get_freeze_count():
        return
    gc.freeze()                 # all generations -> the permanent one (count of generation 0 reset)
    gc.unfreeze()               # the permanent generation -> the oldest one
