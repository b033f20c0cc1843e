"""Pause Python's cyclic garbage collector while a program is traced, resolved, scheduled or replayed.

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
collected); here garbage cycles made during the block, or by other threads, are collected later,
by the next full collection. A process that froze objects itself keeps them frozen: then nothing
is moved.

Full collections are scheduled here, not by CPython. Its rule — a full collection once the objects
that survived younger collections outnumber a quarter of the oldest generation — never counts the
objects moved here, so a process that replays for hours never ran one: the trn2 server kept every
garbage cycle of every request (issue 24: +0.75 MB per request, without end). So when a block ends,
`promote_to_oldest` runs a full collection itself once the CPU time spent in blocks since the last
one is at least `COLLECTION_EVERY` (1 s) and at least `1 / COLLECTION_SHARE` (10) times what the
last one cost. Full collections then take at most a tenth of the time spent tracing and replaying,
and a short trace or replay (under a CPU second) never waits for one; since a collection's cost
grows with the heap, the garbage that can build up between two of them stays a bounded multiple of
the live heap.
"""
from __future__ import annotations

import contextlib
import gc
import threading
import time

from .. import config

_lock = threading.Lock()
_depth = 0
_was_enabled = False
COLLECTION_EVERY = 1.0         # CPU seconds in blocks between two full collections, at least
COLLECTION_SHARE = 0.1         # and at most this share of that time spent in full collections
_block_cpu = 0.0               # CPU seconds spent in (outermost) blocks since the last full collection
_block_start = 0.0
_last_cost = 0.0               # CPU seconds the last full collection took
full_collections = 0            # run here, and their CPU time (for tests and the soak benchmark)
full_collection_s = 0.0


@contextlib.contextmanager
def paused():
    """No cyclic collection inside the block (nested and concurrent blocks are fine); its objects
    join the oldest generation afterwards without being scanned. Only on the fast path."""
    global _depth, _was_enabled, _block_cpu, _block_start
    if not config.fast():
        yield
        return
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
            _block_start = time.process_time()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                _block_cpu += time.process_time() - _block_start
                promote_to_oldest()
                gc.enable()


def promote_to_oldest() -> None:
    """Move every object the collector tracks into its oldest generation, visiting none — unless
    the process froze objects itself (`gc.freeze`, e.g. before forking workers): those must stay
    frozen, so then nothing is moved and the usual collection runs. Then a full collection, if one
    is due (see the module docstring)."""
    global _block_cpu, _last_cost, full_collections, full_collection_s
    if gc.get_freeze_count():
        return
    gc.freeze()                 # all generations -> the permanent one (count of generation 0 reset)
    gc.unfreeze()               # the permanent generation -> the oldest one
    if _block_cpu >= max(COLLECTION_EVERY, _last_cost / COLLECTION_SHARE):
        start = time.process_time()
        gc.collect()
        _last_cost = time.process_time() - start
        _block_cpu = 0.0
        full_collections += 1
        full_collection_s += _last_cost
