"""The collector pause of tracing and replay (`trnlab/hardware/_gc.py`): objects made inside the
block join the oldest generation unscanned, and garbage cycles made there are still collected."""
from __future__ import annotations

import gc
import time
import weakref

import pytest

from trnlab import config
from trnlab.hardware import _gc


@pytest.fixture(autouse=True)
def _fast_paths_on():
    """The pause is a fast path: on here, even with TRNLAB_FAST=0 (tests/test_fast_paths.py checks
    that the reference never pauses)."""
    with config.override(fast=True):
        yield


class _Node:
    pass


def test_objects_made_while_paused_join_the_oldest_generation_and_cycles_are_still_collected():
    assert gc.isenabled()
    with _gc.paused():
        assert not gc.isenabled()
        kept = [_Node() for _ in range(2000)]
        cycle = _Node()
        cycle.me = cycle                     # garbage once dropped: only the collector frees it
        alive = weakref.ref(cycle)
        del cycle
    assert gc.isenabled()
    assert gc.get_count()[0] < 700           # no pending collection of the young generation
    assert any(o is kept[0] for o in gc.get_objects(generation=2))
    assert alive() is not None               # not collected yet (nothing scanned it)
    gc.collect()
    assert alive() is None                   # a full collection frees it: nothing is exempt


def test_a_process_that_froze_objects_keeps_them_frozen():
    frozen = _Node()
    # under the pause's lock: a replay running in another thread of this test process (a server
    # test's engine) may be promoting its objects at this moment, which would unfreeze ours
    with _gc._lock:
        gc.freeze()
        count = gc.get_freeze_count()
    try:
        with _gc.paused():
            [_Node() for _ in range(100)]
        # still frozen (a frozen object freed by reference counting meanwhile may lower the count)
        assert gc.get_freeze_count() > count // 2
        assert not any(o is frozen for o in gc.get_objects(generation=2))
    finally:
        with _gc._lock:
            gc.unfreeze()
    del frozen


def test_nested_pauses_enable_the_collector_once_at_the_outermost_end():
    with _gc.paused():
        with _gc.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_blocks_repeated_without_end_still_get_full_collections(monkeypatch):
    """A server replays programs for hours: garbage cycles made in its blocks are collected by the full
    collections the pause schedules itself (CPython's own rule never counts what it moves; issue 24)."""
    monkeypatch.setattr(_gc, "COLLECTION_EVERY", 0.02)   # CPU s in blocks between two (1 s as shipped)
    monkeypatch.setattr(_gc, "_last_cost", 0.0)          # whatever this process collected before
    monkeypatch.setattr(_gc, "_block_cpu", 0.0)
    before, before_s, cpu = _gc.full_collections, _gc.full_collection_s, time.process_time()
    made = []
    for _ in range(60):
        with _gc.paused():
            kept = [_Node() for _ in range(20_000)]   # a replay's records: alive to the block's end
            cycle = _Node()
            cycle.me = cycle                         # garbage once dropped: only the collector frees it
            made.append(weakref.ref(cycle))
            del cycle                                # `kept` is freed when the next block rebinds it
    assert _gc.full_collections > before             # nobody called gc.collect()
    assert made[0]() is None                         # the first block's cycle: collected by one of them
    # and they take at most about a tenth of the time spent in the blocks
    assert _gc.full_collection_s - before_s <= _gc.COLLECTION_SHARE * (time.process_time() - cpu) + _gc._last_cost
