"""The memories of one NeuronCore: HBM (off chip), SBUF and PSUM (on chip) with real allocation.

SBUF and PSUM are 2-D [ARCH-v2]: `partitions` rows (128) by a free dimension of bytes per
partition (SBUF 192/224/256 KiB on Trn1/2/3; PSUM 16 KiB cut into 8 banks of 2 KiB). An
allocation of shape (..., P, ...) with partition axis P holds bytes [offset, offset + bytes per
partition) of partitions 0..P-1; to keep the allocator simple that byte range is reserved on
every partition. `free` releases it. Rules checked at allocation:

- P <= partitions (PartitionLimitError);
- the bytes per partition fit in what is left (SBUFOverflowError / PSUMOverflowError);
- PSUM: one tile (the dims after the partition axis) fits in a 2 KiB bank (PSUMBankError), and a
  tile never straddles two banks (an allocation larger than a bank starts on a bank boundary).

Placement rotates (next fit): a new tile goes into the first gap at or after the end of the previous
allocation, wrapping to the start of the memory only when nothing fits further on. So a block that was just freed is reused as late as possible,
and a loop that allocates a tile per iteration gets several buffers in turn (as the Neuron compiler
rotates a loop's tile over several buffers) instead of landing on the bytes the previous
iteration's instructions still read.

Hazards follow bytes, not only tensor objects: `free` remembers, for the freed byte range, when its
last access ends (the latest read end or write ready of the freed tensor). A tensor later placed on
any of those bytes inherits that time as a read of its whole extent, so its first write waits for
the old tile's last reader and writer (WAR / WAW on the memory, not just on the object).

HBM is the chip's device memory; a core sees its share (`CoreSpec.hbm_bytes`). HBM tensors have no
partition axis. New on-chip tensors are filled with NaN (integers: their minimum) and reading an
element never written raises UninitializedReadError (full mode).
"""
from __future__ import annotations

import contextlib
import threading
import time
from bisect import bisect_right

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _blas, dtypes
from .errors import (HBMOverflowError, PartitionLimitError, PSUMBankError, PSUMOverflowError,
                     SBUFOverflowError)
from .presets import CoreSpec, KiB, MiB
from .tensor import Tensor


def _fmt_bytes(n: float) -> str:
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= KiB:
        return f"{n / KiB:.1f} KiB"
    return f"{int(n)} B"


_EXECUTOR = None
_SMALL_GROUP_FLOPS = 1 << 24    # below this, deferred products run inline, not in the thread pool
_WIDEN_KEPT = 64 * 1024 * 1024  # bytes of fp32 input copies a PSUM memory keeps between runs


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=_blas.workers(), thread_name_prefix="trnlab-psum")
    return _EXECUTOR


class _Computing:
    """A tensor's `_pending` while a worker computes its deferred products (`start_pending`)."""
    __slots__ = ("future", "compute")

    def __init__(self, future, compute):
        self.future, self.compute = future, compute

    def wait(self, t: Tensor) -> None:
        """Until the products are in: computed here if no worker has started them yet (on a busy
        machine a worker may wait milliseconds for a core; the caller has one now)."""
        _finish(self.future, self.compute)
        if t._pending is self:
            t._pending = None


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


def _stacker(fp32_buffer, widening: "_Widening | None" = None):
    """`stacked(snapshots)`: the fp32 [sum K, F] operand of a deferred group (from its snapshots,
    `Tensor.snapshot`); stacks are shared between the groups of one call's tensors. `fp32_buffer(shape)`
    gives the array a cast into fp32 fills; `widening`, a values replay's fp32 copies of its
    read-only inputs (stacks of their tiles come from there)."""
    stacks = {}

    def concatenated(parts):
        if all(p.dtype == np.float32 for p in parts):
            # no cast: a plain new array measured faster here than a reused buffer (1024^3 fp32
            # tiled kernel, 5 runs: 30.0-33.8 ms vs 31.9-34.9 ms)
            if len(parts) == 1:
                return parts[0]
            stacked_view = _adjacent_rows(parts)
            return np.concatenate(parts) if stacked_view is None else stacked_view
        if widening is not None:
            source = widening.inputs.get(id(parts[0].base))
            if source is not None:
                region = parts[0] if len(parts) == 1 else _adjacent_rows(parts)
                if region is not None:
                    return widening.fp32(source, region)
        rows = sum(p.shape[0] for p in parts)
        buffer = fp32_buffer((rows,) + parts[0].shape[1:])
        return np.concatenate(parts, out=buffer, casting="unsafe")

    def stacked(snapshots):
        """Snapshots of whole 2-D tiles are stacked as whole arrays (shared between the tiles of
        a block) and sliced afterwards."""
        first_index = snapshots[0][1]
        simple = all(s[3] for s in snapshots) and all(
            s[0].shape == snapshots[0][0].shape and s[1] == first_index for s in snapshots)
        key = tuple(id(s[0]) for s in snapshots)
        if not simple:
            key = key + (id(snapshots),)
        if key not in stacks:
            if simple:
                whole = concatenated([s[0] for s in snapshots])
            else:
                whole = concatenated([s[0][s[1]].reshape(s[2], -1) for s in snapshots])
            stacks[key] = whole
        whole = stacks[key]
        if simple and first_index is not None:
            return whole[:, first_index[1]].reshape(whole.shape[0], -1)
        return whole

    return stacked


class _Widening:
    """A values replay's fp32 copies of its read-only inputs, for one run (`OnChipMemory.start_widening`).

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
    (tiles loaded without a copy from a matrix in HBM: `compiled.dma_load_aliasing`), else None.
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


class HBM:
    """Device memory: capacity accounting, tensors without a partition axis."""

    kind = "hbm"

    def __init__(self, spec: CoreSpec, with_data: bool):
        self.capacity = spec.hbm_bytes
        self.with_data = with_data
        self.used = 0
        self.tensors: list[Tensor] = []
        self._count = 0

    def _reserve(self, nbytes: int, name: str):
        if self.used + nbytes > self.capacity:
            raise HBMOverflowError(
                f"HBM overflow: {_fmt_bytes(nbytes)} requested for {name!r}, "
                f"{_fmt_bytes(self.capacity - self.used)} free of {_fmt_bytes(self.capacity)} "
                f"per core", value=nbytes, limit=self.capacity - self.used)
        self.used += nbytes

    def _name(self, name):
        self._count += 1
        return name or f"hbm{self._count}"

    def allocate(self, shape, dtype, name: str | None = None) -> Tensor:
        """An uninitialised HBM tensor (e.g. a kernel's output)."""
        name = self._name(name)
        dt = dtypes.as_dtype(dtype)
        self._reserve(math.prod(shape) * dt.itemsize, name)
        t = Tensor(self, shape, dt, name, None, 0, self.with_data)
        self.tensors.append(t)
        return t

    def tensor(self, array, name: str | None = None, dtype=None, copy: bool = True) -> Tensor:
        """An HBM tensor holding a copy of `array` (cast to `dtype` if given).

        ``copy=False``: hold `array` itself when it is already a C-contiguous array of `dtype`
        (the caller hands it over and must not change it afterwards)."""
        name = self._name(name)
        arr = np.asarray(array)
        dt = dtypes.as_dtype(dtype if dtype is not None else
                             (np.float32 if arr.dtype == np.float64 else arr.dtype))
        self._reserve(arr.size * dt.itemsize, name)
        if not self.with_data:
            data = None
        elif not copy and arr.dtype == dt and arr.flags.c_contiguous:
            data = arr
        else:
            data = dtypes.cast(arr, dt)
        t = Tensor(self, arr.shape, dt, name, None, 0, self.with_data, fill=data)
        if not self.with_data:
            t.written = None
        self.tensors.append(t)
        return t

    def alias(self, tensor: Tensor, shape, name: str | None = None, dtype=None) -> Tensor:
        """Another shape for the same bytes of a whole HBM tensor (row-major). Values and the
        written-mask are shared: what one writes, the other reads (a kernel's reshaped output).

        ``dtype``: the bytes read as another type (shape in its elements, the last axis scaled by
        the size ratio), e.g. uint8 bytes as 16-bit 4-packed FP4 (NKI's ``.ap(dtype=)``). The values
        stay shared; the written-mask is derived once (an element is written if all its bytes are),
        so such an alias is for reading what is already there."""
        shape = tuple(int(n) for n in shape)
        new_dtype = tensor.dtype if dtype is None else dtypes.as_dtype(dtype)
        if new_dtype.itemsize * math.prod(shape) != tensor.nbytes:
            raise ValueError(f"HBM alias: {tensor.name} {tensor.shape} {dtypes.name(tensor.dtype)} "
                             f"({tensor.nbytes} bytes) cannot be viewed as {shape} {dtypes.name(new_dtype)}")
        if tensor.data is None:
            data = None
        elif new_dtype == tensor.dtype:
            data = tensor.data.reshape(shape)
        else:
            data = np.ascontiguousarray(tensor.data).view(np.uint8).reshape(-1).view(new_dtype).reshape(shape)
        if data is not None and not np.shares_memory(data, tensor.data):
            raise ValueError(f"HBM alias: {tensor.name} {tensor.shape} cannot be viewed as {shape} "
                             "without a copy (not contiguous)")
        t = Tensor(self, shape, new_dtype, name or f"{tensor.name}.reshape", None, 0,
                   data is not None, fill=data)
        if tensor.written is None:
            t.written = None
        elif new_dtype == tensor.dtype:
            t.written = tensor.written.reshape(shape)
        else:                                   # per byte, then per element of the new type
            per_byte = np.repeat(tensor.written.reshape(-1), tensor.dtype.itemsize)
            t.written = per_byte.reshape(-1, new_dtype.itemsize).all(axis=1).reshape(shape)
        t.alias_of = tensor
        return t

    def free(self, tensor: Tensor):
        if getattr(tensor, "alias_of", None) is not None:
            tensor.freed = True                  # an alias owns no bytes of its own
            return
        if not tensor.freed:
            tensor.freed = True
            self.used -= tensor.nbytes
            self.tensors.remove(tensor)


def first_fit(occupied, nbytes: int, lowest: int, partition_bytes: int, bank: int | None) -> int | None:
    """The first offset >= `lowest` where `nbytes` per partition fit between the `occupied`
    (offset, size) ranges (sorted by offset); in PSUM (`bank`: bank bytes) a tile larger than a
    bank starts on a bank boundary and a smaller one never straddles two. None if nothing fits."""
    cursor = lowest
    for offset, size in list(occupied) + [(partition_bytes, 0)]:
        start = cursor
        if bank is not None:
            if nbytes > bank:
                start = -(-start // bank) * bank        # whole banks: start on a boundary
            elif start // bank != (start + nbytes - 1) // bank:
                start = -(-start // bank) * bank        # would straddle: next bank
        if start + nbytes <= offset:
            return start
        if offset + size > cursor:
            cursor = offset + size
    return None


def take_ranges(ranges: list, starts: list, lo: int, hi: int) -> list:
    """Take the ranges overlapping [lo, hi) out of `ranges` — disjoint ``[lo', hi', *payload]``
    lists sorted by lo' (`starts`: their lo', for bisect) — and return them in order; their parts
    outside [lo, hi) stay, with the same payload. A bisect finds the few that overlap: only the
    first can begin before lo and only the last end after hi."""
    i = bisect_right(starts, lo) - 1
    if i < 0 or ranges[i][1] <= lo:
        i += 1
    j = i
    n = len(ranges)
    while j < n and ranges[j][0] < hi:
        j += 1
    if j == i:
        return []
    taken = ranges[i:j]
    pieces = []
    first, last = taken[0], taken[-1]
    if first[0] < lo:
        pieces.append([first[0], lo] + first[2:])
    if last[1] > hi:
        pieces.append([hi, last[1]] + last[2:])
    ranges[i:j] = pieces
    starts[i:j] = [r[0] for r in pieces]
    return taken


def put_range(ranges: list, starts: list, range_: list) -> None:
    """Insert ``[lo, hi, *payload]`` into the sorted disjoint `ranges`, taking out anything it
    overlaps (nothing should: the bytes were taken out when the tile was placed)."""
    lo = range_[0]
    take_ranges(ranges, starts, lo, range_[1])
    k = bisect_right(starts, lo)
    ranges.insert(k, range_)
    starts.insert(k, lo)


class OnChipMemory:
    """SBUF or PSUM: partitions × bytes-per-partition, rotating (next-fit) allocation of byte ranges."""

    def __init__(self, kind: str, spec: CoreSpec, with_data: bool):
        self.kind = kind
        self.spec = spec
        self.with_data = with_data
        self.partitions = spec.partitions
        if kind == "sbuf":
            self.partition_bytes = spec.sbuf_partition_bytes
            self.bank_bytes = None
            self._overflow = SBUFOverflowError
        else:
            self.partition_bytes = spec.psum_partition_bytes
            self.bank_bytes = spec.psum_bank_bytes
            self._overflow = PSUMOverflowError
        self.tensors: list[Tensor] = []       # live allocations, sorted by offset
        self._count = 0
        self._cursor = 0                      # next fit starts here: the end of the last allocation
        self._retired: list[list] = []        # freed byte ranges [lo, hi, last access ns, index], by lo
        self._retired_starts: list[int] = []  # their lo, for bisect
        self.pending: list[Tensor] = []       # PSUM tensors with deferred matmul products
        self._scratch: dict[tuple, list] = {}  # shape -> float32 arrays reused by flush_pending
        self._started: list = []              # futures of the products start_pending started
        self._ready: list[Tensor] = []        # tiles whose products start with the next start_pending
        self.widening: _Widening | None = None  # a values replay's fp32 copies of its inputs, for one run
        self._widen_pool: dict = {}           # shape -> fp32 arrays of whole inputs, for the next run

    def flush_pending(self, touched: Tensor | None = None):
        """Compute every deferred PSUM product (in parallel threads, BLAS single-threaded). When
        `touched` (the tensor whose values are wanted) has its products already computing
        (`start_pending`), wait for those only: the other tiles' groups stay pending, since a read
        that `values_order` moved may come after the first matmuls of a later tile's K loop, whose
        group must not be cut in two (its sum would round differently from program order's)."""
        if touched is not None and type(touched._pending) is _Computing:
            touched._pending.wait(touched)
            return
        pending = self.pending
        if len(pending) == 1 and self._flush_one(pending[0]):
            return
        tensors = list({id(t): t for t in pending if t._pending is not None}.values())
        self.pending = []
        groups = [(t, g) for t in tensors for g in t.take_pending()]
        if not groups:
            return
        scratch = self._scratch
        taken = []

        def fp32_buffer(shape):
            """A reused float32 array: fresh memory costs a page fault per 4 KiB on first touch."""
            free = scratch.get(shape)
            buffer = free.pop() if free else np.empty(shape, np.float32)
            taken.append(buffer)
            return buffer

        stacked = _stacker(fp32_buffer, self.widening)
        jobs = [(t, g[0], g[1], stacked(g[2]), stacked(g[3])) for t, g in groups]
        if len(jobs) == 1:
            stationary, moving = jobs[0][3], jobs[0][4]       # [sum K, M], [sum K, N]
            flops = 2 * stationary.shape[0] * stationary.shape[1] * moving.shape[1]
            # one large product with nothing beside it: BLAS may use every core
            threads = contextlib.nullcontext() if flops >= _blas.MULTITHREAD_FLOPS else _blas.single_threaded()
            with threads:
                jobs[0][0].apply(*jobs[0][1:])
        else:
            flops = sum(2 * j[3].shape[0] * j[3].shape[1] * j[4].shape[1] for j in jobs)
            with _blas.single_threaded():
                if flops < _SMALL_GROUP_FLOPS:
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
        self.widening = _Widening(inputs, self._widen_pool)

    def end_widening(self) -> None:
        """The run is over (its products are done): its whole-input fp32 arrays go back to the pool
        for the next run of the same shapes, at most _WIDEN_KEPT bytes in all (a fresh 16 MB array
        costs 4,096 page faults)."""
        if self.widening is None:
            return
        kept = sum(a.nbytes for arrays in self._widen_pool.values() for a in arrays)
        for copy in self.widening.whole:
            if kept + copy.nbytes <= _WIDEN_KEPT:
                self._widen_pool.setdefault(copy.shape, []).append(copy)
                kept += copy.nbytes
        self.widening = None

    def start_pending(self, t: Tensor) -> None:
        """Start computing `t`'s deferred products now, in a worker thread, where the caller knows
        that no matmul adds to them before their next read (full mode's values replay:
        `compiled.values_order`); that read waits for them (`flush_pending(t)`). The same products
        as a flush computes — only earlier, beside the caller's next instructions. Tiles made
        `ready` just before start with `t`'s, and those sharing their operands merge into one
        product (`_batches`). Call `finish_started` before BLAS's thread count changes."""
        tensors, self._ready = self._ready + [t], []
        tensors = list({id(x): x for x in tensors if type(x._pending) is dict}.values())
        if not tensors:
            return
        ids = {id(x) for x in tensors}
        self.pending = [p for p in self.pending if id(p) not in ids]
        jobs = [(x, g) for x in tensors for g in x.take_pending()]
        stacked = _stacker(lambda shape: np.empty(shape, np.float32), self.widening)
        for batch in _batches(jobs):
            compute = _batch_computer(batch, stacked)
            if sum(2 * g[4] * g[0].size for _, g in batch) < _SMALL_GROUP_FLOPS:
                compute()               # small: handing it to a thread costs more
                continue
            future = _executor().submit(compute)
            _let_worker_start()
            self._started.append(future)
            computing = _Computing(future, compute)
            for x, _ in batch:
                x._pending = computing

    def ready(self, t: Tensor) -> None:
        """`t`'s run of matmuls has ended and the next step ends another tile's (`compiled.values_plan`):
        its products start with that tile's (`start_pending`)."""
        if type(t._pending) is dict:
            self._ready.append(t)

    def finish_started(self, raise_errors: bool = True) -> None:
        """Wait for every product `start_pending` started (their errors are raised here, unless
        the caller is already raising one)."""
        started, self._started = self._started, []
        self._ready = []
        for future in started:
            if future.cancelled():          # computed by the thread that read it (_Computing.wait)
                continue
            error = future.exception()
            if error is not None and raise_errors:
                raise error

    def _flush_one(self, t: Tensor) -> bool:
        """`flush_pending` of its most common case without the bookkeeping: one tensor, one group of one
        fp32 product (a PSUM tile written by a single matmul, e.g. each product of an attention head),
        with the operands the general path builds for it (`stacked` of one snapshot)."""
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
        self.pending = []
        t._pending = None
        stationary, moving = operands
        flops = 2 * stationary.shape[0] * stationary.shape[1] * moving.shape[1]
        with contextlib.nullcontext() if flops >= _blas.MULTITHREAD_FLOPS else _blas.single_threaded():
            t.apply(view, overwrite, stationary, moving)
        return True

    @property
    def capacity(self) -> int:
        return self.partitions * self.partition_bytes

    @property
    def used_partition_bytes(self) -> int:
        return sum(t.partition_bytes for t in self.tensors)

    def check_tile(self, shape, dtype, name: str | None = None, partition_axis: int = 0):
        """The rules of a tile's shape alone (no placement): partitions <= 128 and, in PSUM, one tile
        within a bank. Returns (shape, dtype, partition_axis, bytes per partition)."""
        shape = tuple(int(s) for s in shape)
        dt = dtypes.as_dtype(dtype)
        name = name or self.kind
        if not shape:
            raise PartitionLimitError(f"partition limit: {self.kind.upper()} tensor {name!r} "
                                      f"needs a partition axis", value=0, limit=self.partitions)
        if not -len(shape) <= partition_axis < len(shape):
            raise ValueError(f"partition_axis={partition_axis} for a {len(shape)}-d shape")
        partition_axis %= len(shape)
        nparts = shape[partition_axis]
        if nparts > self.partitions:
            raise PartitionLimitError(
                f"partition limit: {nparts} partitions requested for {name!r}, "
                f"{self.kind.upper()} has {self.partitions}", value=nparts, limit=self.partitions)
        per_partition = math.prod(shape) // max(nparts, 1) * dt.itemsize
        if self.bank_bytes is not None:
            tile_bytes = math.prod(shape[partition_axis + 1:]) * dt.itemsize
            if tile_bytes > self.bank_bytes:
                raise PSUMBankError(
                    f"PSUM bank size: a tile of {name!r} needs {tile_bytes} bytes per partition, "
                    f"one PSUM bank holds {self.bank_bytes} bytes "
                    f"({self.bank_bytes // 4} fp32); split the free dimension",
                    value=tile_bytes, limit=self.bank_bytes)
        return shape, dt, partition_axis, per_partition

    def overflow(self, per_partition: int, name: str, live: str = "", used: int | None = None):
        """The overflow error for a tile of `per_partition` bytes that does not fit (`used`: bytes
        per partition taken, if not this memory's live tensors)."""
        free = self.partition_bytes - (self.used_partition_bytes if used is None else used)
        label = "SBUF" if self.kind == "sbuf" else "PSUM"
        return self._overflow(
            f"{label} overflow: {_fmt_bytes(per_partition)} per partition requested for "
            f"{name!r} ({_fmt_bytes(per_partition * self.partitions)} over "
            f"{self.partitions} partitions), {_fmt_bytes(free)} free of "
            f"{_fmt_bytes(self.partition_bytes)} per partition "
            f"({_fmt_bytes(self.capacity)} per core){live}",
            value=per_partition, limit=free)

    def allocate(self, shape, dtype, name: str | None = None, partition_axis: int = 0,
                 offset: int | None = None) -> Tensor:
        """Reserve a tile; shape[partition_axis] is the partition dimension (NKI's par_dim).
        ``offset``: place it at that byte offset (a program's allocation), else next fit."""
        self._count += 1
        name = name or f"{self.kind}{self._count}"
        shape, dt, partition_axis, per_partition = self.check_tile(shape, dtype, name, partition_axis)
        if offset is None:
            offset = self._next_fit(per_partition)
            if offset is None:
                raise self.overflow(per_partition, name)
        elif offset < 0 or offset + per_partition > self.partition_bytes or any(
                t.offset < offset + per_partition and offset < t.offset + t.partition_bytes
                for t in self.tensors):
            raise self.overflow(per_partition, name, f"; offset {offset} is taken or out of range")
        t = Tensor(self, shape, dt, name, partition_axis, offset, self.with_data)
        inherited = self._inherit(offset, offset + t.partition_bytes)
        if inherited is not None:
            t._reads.append((None,) + inherited)      # WAR / WAW on the reused bytes
        self._cursor = offset + t.partition_bytes
        self.tensors.append(t)
        self.tensors.sort(key=lambda x: x.offset)
        return t

    def _inherit(self, lo: int, hi: int):
        """Take the freed ranges overlapping [lo, hi) out of the retired list; return the latest
        (last access ns, instruction index) among them, or None."""
        latest = None
        for r in take_ranges(self._retired, self._retired_starts, lo, hi):
            if latest is None or r[2] > latest[0]:
                latest = (r[2], r[3])
        return latest

    def _retire(self, tensor: Tensor):
        """Remember when the last access to a freed tensor's bytes ends."""
        last, index = 0.0, -1
        for _, end, i in tensor._reads:
            if end > last:
                last, index = end, i
        for record in tensor._writes:
            if record[1] > last:
                last, index = record[1], record[2]
        if index < 0:
            return
        put_range(self._retired, self._retired_starts, [tensor.offset, tensor.offset + tensor.partition_bytes,
                                                        last, index])

    def _next_fit(self, nbytes: int) -> int | None:
        """The first place at or after the cursor where `nbytes` fit, else the first from 0."""
        offset = self._fit(nbytes, self._cursor)
        if offset is None and self._cursor > 0:
            offset = self._fit(nbytes, 0)
        return offset

    def _fit(self, nbytes: int, lowest: int) -> int | None:
        return first_fit([(t.offset, t.partition_bytes) for t in self.tensors], nbytes, lowest,
                         self.partition_bytes, self.bank_bytes)

    def free(self, tensor: Tensor):
        """Release a tile (its memory may be reused; using the tensor afterwards raises)."""
        if not tensor.freed:
            tensor.freed = True
            self._retire(tensor)
            tensor._pending = None
            # drop the values now: caches elsewhere may still hold the Tensor object
            tensor._data = None
            tensor.written = None
            tensor.poison = None
            self.tensors.remove(tensor)

    def occupancy(self) -> list[dict]:
        """Live allocations as rectangles: name, partitions, byte offset and size per partition."""
        return [{"name": t.name, "partitions": t.partitions, "offset": t.offset,
                 "bytes": t.partition_bytes, "dtype": dtypes.name(t.dtype), "shape": t.shape}
                for t in self.tensors]

    def __repr__(self) -> str:
        return (f"{self.kind.upper()}({self.partitions} partitions × "
                f"{_fmt_bytes(self.partition_bytes)}, {len(self.tensors)} tensors, "
                f"{_fmt_bytes(self.used_partition_bytes)} used per partition)")
