"""Deferred PSUM products computed in worker threads, with BLAS on one thread each.

Fast path (`trnlab.config.fast()`) beside the reference `OnChipMemory.flush_pending` (memory.py),
which computes a read's pending products one after another in the reading thread: each group of
accumulating matmuls as one product over its stacked K (`memory.stacker`). Here the same products,
with the same operands, run in parallel Python threads (NumPy releases the GIL inside BLAS; BLAS is
single-threaded for them: `_blas.single_threaded`), and the values replay (`values_replay.py`) may
start a tile's products in a worker as soon as its K loop ends (`Products.start`) and have the
products of tiles sharing their operands merged into one (`_batches`; the same bits per row: BLAS's
K order does not depend on how many rows it computes). The stacks may come from fp32 copies of the
read-only inputs made once per run (`_Widening`) or be views of one input (`_adjacent_rows`).
Every product has the bits of the reference's: tests/test_fast_paths.py compares the library
kernels' outputs with the reference's; tests/test_values_order.py checks merging and waiting.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import _blas
from ..memory import stacker
from ..tensor import Tensor

_EXECUTOR = None
_SMALL_GROUP_FLOPS = 1 << 24    # below this, deferred products run inline, not in the thread pool
_WIDEN_KEPT = 64 * 1024 * 1024  # bytes of fp32 input copies a PSUM memory keeps between runs


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=_blas.workers(), thread_name_prefix="trnlab-psum")
    return _EXECUTOR


class _Computing:
    """Deferred products a worker computes (`Tensor.start_computing`, `Products.start`)."""
    __slots__ = ("future", "compute")

    def __init__(self, future, compute):
        self.future, self.compute = future, compute

    def wait(self) -> None:
        """Until the products are in: computed here if no worker has started them yet (on a busy
        machine a worker may wait milliseconds for a core; the caller has one now)."""
        _finish(self.future, self.compute)

    def abandon(self) -> None:
        """Never to be read (its tile was reset or dropped): not computed if not started yet."""
        self.future.cancel() or self.future.exception()


def _let_worker_start() -> None:
    """Yield the GIL once: a worker just handed a product takes it now, reaches BLAS (which releases
    it) and computes beside this thread — instead of waiting up to the interpreter's switch interval
    (5 ms) while this thread runs Python (measured: 3 ms median delay without, 0.02-0.07 ms with)."""
    time.sleep(0)


def run_parallel(calls: list) -> None:
    """Run the callables in the pool's threads and this one: this thread takes the first, and any
    the pool has not started by the time it gets to them."""
    futures = [_executor().submit(c) for c in calls[1:]]
    _let_worker_start()
    calls[0]()
    for future, call in zip(futures, calls[1:]):
        _finish(future, call)


def _finish(future, call) -> None:
    """Until `call` (submitted as `future`) has run: here, if no worker has started it yet."""
    if future.cancel():
        call()
    else:
        future.result()


def _batches(jobs: list) -> list:
    """Deferred groups [(tensor, group)] -> batches, each computed by one worker: a tensor's
    groups stay together, and the one-group fp32 tiles whose groups have the same moving snapshots
    and stationaries from the same snapshots, in adjacent column ranges, merge into one product —
    the tiles of a GEMM block that share rhs columns (a product over 2 or 4 M tiles ran 8-12 %
    faster in BLAS than each alone, with the same bits for each row: BLAS's K order does not
    depend on how many rows it computes)."""
    batches, mergeable = [], []             # all batches; those open to merging
    count = {}
    for x, _ in jobs:
        count[id(x)] = count.get(id(x), 0) + 1
    for job in jobs:
        if count[id(job[0])] == 1 and _mergeable(job):
            for batch in mergeable:
                if _adjacent(batch[-1][1], job[1]):
                    batch.append(job)
                    break
            else:
                mergeable.append([job])
                batches.append(mergeable[-1])
        elif batches and batches[-1][0][0] is job[0] and count[id(job[0])] > 1:
            batches[-1].append(job)             # the next group of the same tensor
        else:
            batches.append([job])
    return batches


def _mergeable(job) -> bool:
    view, _, stationaries, _, _ = job[1]
    index = stationaries[0][1]
    return (view.tensor.dtype == np.float32 and view.basic and len(view.shape) == 2
            and all(s[3] and s[1] == index for s in stationaries)
            and type(index) is tuple and len(index) == 2 and type(index[1]) is slice
            and index[1].step in (None, 1) and index[1].start is not None
            and view.shape[0] == index[1].stop - index[1].start)


def _adjacent(a, b) -> bool:
    """Group b continues group a: the same overwrite and moving snapshots, stationaries of the same
    arrays whose columns start where a's end."""
    if a[1] != b[1] or len(a[2]) != len(b[2]) or len(a[3]) != len(b[3]):
        return False
    ia, ib = a[2][0][1], b[2][0][1]
    if ia[0] != ib[0] or ia[1].stop != ib[1].start or a[0].shape[1] != b[0].shape[1]:
        return False
    return all(sa[0] is sb[0] for sa, sb in zip(a[2], b[2])) and all(
        ma[0] is mb[0] and ma[1] == mb[1] for ma, mb in zip(a[3], b[3]))


def _batch_computer(batch: list, stacked):
    """The callable computing one batch (`_batches`), once: a worker, or the reader if no worker
    started it, runs it; a second call does nothing (the tiles of a merged batch share it)."""
    done = []

    def compute():
        if done:
            return
        done.append(True)
        if len(batch) == 1 or batch[0][0] is batch[1][0]:      # one tensor's groups
            for x, (view, overwrite, stationaries, movings, _) in batch:
                x.apply(view, overwrite, stacked(stationaries), stacked(movings))
            return
        first, last = batch[0][1][2][0][1], batch[-1][1][2][0][1]
        columns = (first[0], slice(first[1].start, last[1].stop))
        merged = [(s[0], columns, s[2], True) for s in batch[0][1][2]]
        with np.errstate(invalid="ignore", over="ignore"):    # garbage (NaN) in padding is allowed
            product = stacked(merged).T @ stacked(batch[0][1][3])     # [sum M, N]
        row = 0
        for x, (view, overwrite, _, _, _) in batch:
            x.add_product(view, overwrite, product[row:row + view.shape[0]])
            row += view.shape[0]

    return compute




class _Widening:
    """A values replay's fp32 copies of its read-only inputs, for one run (`Products.start_widening`).

    A region of an input (e.g. the K-stacked moving tiles loaded from one matrix) is cast once per
    run: the tiles of a tiled matmul stack the same input columns again for every output row block
    (the 2048^3 bf16 tiled kernel cast 84 M elements for 8 M). Where the region is a large part of
    its input (an eighth or more) the whole input is cast once, in one contiguous pass, into an array
    kept from an earlier run if one has its shape, and the region is a view of that: a product of
    such a row-strided view has the bits of a contiguous copy's (BLAS packs its operands; regions of
    one column, whose products take BLAS's matrix-vector path, are copied instead)."""

    def __init__(self, inputs: dict, pool: dict):
        self.inputs = inputs            # id of the array owning an input's memory -> the input's array
        self.pool = pool                # shape -> fp32 arrays for whole inputs
        self.copies: dict = {}          # key -> (input, fp32 copy); the input held keeps its id
        self.whole: list = []           # the fp32 copies of whole inputs
        self._locks: dict = {}
        self._lock = threading.Lock()

    def fp32(self, source: np.ndarray, region: np.ndarray) -> np.ndarray:
        """`region`, a view of the read-only input array `source`, as fp32."""
        item = source.itemsize
        offset = region.__array_interface__["data"][0] - source.__array_interface__["data"][0]
        last = offset + sum((n - 1) * st for n, st in zip(region.shape, region.strides)) + item
        whole = (region.ndim == 2 and region.shape[1] >= 2 and 8 * region.size >= source.size
                 and source.flags.c_contiguous and source.dtype == region.dtype
                 and 0 <= offset and last <= source.nbytes and offset % item == 0
                 and all(st > 0 and st % item == 0 for st in region.strides))
        key = (id(source),) if whole else (id(source), offset, region.shape, region.strides)
        entry = self.copies.get(key)
        if entry is None or entry[0] is not source:
            with self._lock:
                lock = self._locks.setdefault(key, threading.Lock())
            with lock:                  # workers stacking from one input cast it once (two, in parallel)
                entry = self.copies.get(key)
                if entry is None or entry[0] is not source:
                    if whole:
                        free = self.pool.get(source.shape)
                        copy = free.pop() if free else np.empty(source.shape, np.float32)
                        np.copyto(copy, source, casting="unsafe")       # exact: bf16/fp8 -> fp32
                        self.whole.append(copy)
                    else:
                        copy = region.astype(np.float32)
                    entry = self.copies[key] = (source, copy)
        if not whole:
            return entry[1]
        return np.lib.stride_tricks.as_strided(entry[1].reshape(-1)[offset // item:], shape=region.shape,
                                               strides=tuple(st // item * 4 for st in region.strides),
                                               writeable=False)


def _adjacent_rows(parts):
    """The row-stacked `parts` as one view, when they are consecutive row blocks of one array
    (tiles loaded without a copy from a matrix in HBM: `ValuesCore.dma_load_aliasing`), else None.
    Only for blocks of at least 2 columns, whose products NumPy hands to BLAS's gemm (bit for bit
    the product of the copy, which np.concatenate would make)."""
    first = parts[0]
    base = first.base
    if base is None or first.ndim != 2 or first.shape[1] < 2 or first.strides[1] != first.itemsize:
        return None
    strides = first.strides
    step = strides[0]
    address = first.__array_interface__["data"][0] + first.shape[0] * step
    for p in parts[1:]:
        if (p.base is not base or p.strides != strides or p.shape[1] != first.shape[1]
                or p.__array_interface__["data"][0] != address):
            return None
        address += p.shape[0] * step
    rows = sum(p.shape[0] for p in parts)
    return np.lib.stride_tricks.as_strided(first, shape=(rows, first.shape[1]), strides=strides,
                                           writeable=False)



class Products:
    """One PSUM memory's deferred products in flight (`products(memory)`): the fp32 stacks reused
    between flushes, the products started in workers, the tiles ready to start with the next, and
    a values replay's fp32 copies of its read-only inputs."""

    def __init__(self):
        self.scratch: dict[tuple, list] = {}  # shape -> float32 arrays reused by flush
        self.started: list = []               # futures of the products `start` started
        self.ready_tiles: list[Tensor] = []   # tiles whose products start with the next `start`
        self.widening: _Widening | None = None  # a values replay's fp32 copies of its inputs, for one run
        self.widen_pool: dict = {}            # shape -> fp32 arrays of whole inputs, for the next run

    def concatenate(self, parts):
        """`memory.stacker`'s fast ways to stack: a view where the parts are adjacent rows of one
        array, an fp32 copy of a read-only input made once per run; None: stack as the reference."""
        if all(p.dtype == np.float32 for p in parts):
            return _adjacent_rows(parts) if len(parts) > 1 else None
        widening = self.widening
        if widening is not None:
            source = widening.inputs.get(id(parts[0].base))
            if source is not None:
                region = parts[0] if len(parts) == 1 else _adjacent_rows(parts)
                if region is not None:
                    return widening.fp32(source, region)
        return None

    def flush(self, memory) -> None:
        """`OnChipMemory.flush_pending`'s products, in parallel threads (BLAS single-threaded)."""
        pending = memory.pending
        if len(pending) == 1 and _flush_one(memory, pending[0]):
            return
        tensors = list({id(t): t for t in pending if t._pending is not None}.values())
        memory.pending = []
        groups = [(t, g) for t in tensors for g in t.take_pending()]
        if not groups:
            return
        scratch = self.scratch
        taken = []

        def fp32_buffer(shape):
            """A reused float32 array: fresh memory costs a page fault per 4 KiB on first touch."""
            free = scratch.get(shape)
            buffer = free.pop() if free else np.empty(shape, np.float32)
            taken.append(buffer)
            return buffer

        stacked = stacker(fp32_buffer, self.concatenate)
        jobs = [(t, g[0], g[1], stacked(g[2]), stacked(g[3])) for t, g in groups]
        flops = sum(2 * j[3].shape[0] * j[3].shape[1] * j[4].shape[1] for j in jobs)
        with _blas.single_threaded():
            if len(jobs) == 1 or flops < _SMALL_GROUP_FLOPS:
                # tiny products (e.g. one decode step): handing them to threads costs more
                for job in jobs:
                    job[0].apply(*job[1:])
            else:
                run_parallel([lambda job=job: job[0].apply(*job[1:]) for job in jobs])
        for buffer in taken:                  # the products are done: the stacks may be reused
            scratch.setdefault(buffer.shape, []).append(buffer)

    def start_widening(self, inputs: dict) -> None:
        """A values replay's run begins: `inputs` (id of the array owning an input's memory -> the
        input's array) are read-only, and products stack their tiles from fp32 copies (`_Widening`)."""
        self.widening = _Widening(inputs, self.widen_pool)

    def end_widening(self) -> None:
        """The run is over (its products are done): its whole-input fp32 arrays go back to the pool
        for the next run of the same shapes, at most _WIDEN_KEPT bytes in all (a fresh 16 MB array
        costs 4,096 page faults)."""
        if self.widening is None:
            return
        kept = sum(a.nbytes for arrays in self.widen_pool.values() for a in arrays)
        for copy in self.widening.whole:
            if kept + copy.nbytes <= _WIDEN_KEPT:
                self.widen_pool.setdefault(copy.shape, []).append(copy)
                kept += copy.nbytes
        self.widening = None

    def start(self, memory, t: Tensor) -> None:
        """Start computing `t`'s deferred products now, in a worker thread, where the caller knows
        that no matmul adds to them before their next read (the values replay: `values_order`);
        that read waits for them (`flush_pending(t)`). The same products as a flush computes —
        only earlier, beside the caller's next instructions. Tiles made `ready` just before start
        with `t`'s, and those sharing their operands merge into one product (`_batches`). Call
        `finish_started` before BLAS's thread count changes."""
        tensors, self.ready_tiles = self.ready_tiles + [t], []
        tensors = list({id(x): x for x in tensors if type(x._pending) is dict}.values())
        if not tensors:
            return
        ids = {id(x) for x in tensors}
        memory.pending = [p for p in memory.pending if id(p) not in ids]
        jobs = [(x, g) for x in tensors for g in x.take_pending()]
        stacked = stacker(None, self.concatenate)
        for batch in _batches(jobs):
            compute = _batch_computer(batch, stacked)
            if sum(2 * g[4] * g[0].size for _, g in batch) < _SMALL_GROUP_FLOPS:
                compute()               # small: handing it to a thread costs more
                continue
            future = _executor().submit(compute)
            _let_worker_start()
            self.started.append(future)
            computing = _Computing(future, compute)
            for x, _ in batch:
                x.start_computing(computing)

    def ready(self, t: Tensor) -> None:
        """`t`'s run of matmuls has ended and the next step ends another tile's (`values_plan`):
        its products start with that tile's (`start`)."""
        if type(t._pending) is dict:
            self.ready_tiles.append(t)

    def finish_started(self, raise_errors: bool = True) -> None:
        """Wait for every product `start` started (their errors are raised here, unless the caller
        is already raising one)."""
        started, self.started = self.started, []
        self.ready_tiles = []
        for future in started:
            if future.cancelled():          # computed by the thread that read it (_Computing.wait)
                continue
            error = future.exception()
            if error is not None and raise_errors:
                raise error


def products(memory) -> Products:
    """The memory's `Products` (made on first use)."""
    if memory.products is None:
        memory.products = Products()
    return memory.products


def _flush_one(memory, t: Tensor) -> bool:
    """`flush`'s most common case without the bookkeeping: one tensor, one group of one fp32
    product (a PSUM tile written by a single matmul, e.g. each product of an attention head), with
    the operands the general path builds for it (`stacker` of one snapshot)."""
    groups = t._pending
    if groups is None or len(groups) != 1:
        return False
    (view, overwrite, stationaries, movings, _), = groups.values()
    if len(stationaries) != 1:
        return False
    operands = []
    for array, index, rows, whole in (stationaries[0], movings[0]):
        if array.dtype != np.float32:
            return False
        if whole:                     # a whole 2-D tile, or all its partitions: the columns
            operands.append(array if index is None else array[:, index[1]].reshape(array.shape[0], -1))
        else:
            operands.append(array[index].reshape(rows, -1))
    memory.pending = []
    t.take_pending()
    stationary, moving = operands
    with _blas.single_threaded():
        t.apply(view, overwrite, stationary, moving)
    return True
