"""The memories of one NeuronCore: HBM (off chip), SBUF and PSUM (on chip) with real allocation.

SBUF and PSUM are 2-D [ARCH-v2]: `partitions` rows (128) by a free dimension of bytes per
partition (SBUF 192/224/256 KiB on Trn1/2/3; PSUM 16 KiB cut into 8 banks of 2 KiB). An
allocation of shape (..., P, ...) with partition axis P holds bytes [offset, offset + bytes per
partition) of partitions 0..P-1; to keep the allocator simple that byte range is reserved on
every partition. `free` releases it. Rules checked at allocation:

- P <= partitions (PartitionLimitError);
- the bytes per partition fit in what is left (SBUFOverflowError / PSUMOverflowError);
- PSUM: a tensor may span several 2 KiB banks (from NKI 0.4 `nl.tile_size.psum_bank_fmax` is "Maximum free
  dimension per PSUM bank per partition", and the older `psum_fmax` "does not represent the free-dim
  size per partition"); one larger than a bank starts on a bank boundary, a smaller one never
  straddles two. What must lie in one bank is a Tensor-engine result: `check_pe_result`, called by
  each instruction that writes PSUM from the PE array (PSUMBankError, at the kernel line).

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

import math
from bisect import bisect_right

import numpy as np

from .. import config
from . import dtypes
from .errors import (HBMOverflowError, PartitionLimitError, PSUMBankError, PSUMOverflowError,
                     SBUFOverflowError)
from .presets import CoreSpec, KiB, MiB
from .tensor import Tensor, View


def _fmt_bytes(n: float) -> str:
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= KiB:
        return f"{n / KiB:.1f} KiB"
    return f"{int(n)} B"


def stacker(fp32_buffer=None, concatenate=None):
    """`stacked(snapshots)`: the fp32 [sum K, F] operand of a deferred group (from its snapshots,
    `Tensor.snapshot`), the group's K slices stacked in the order the matmuls came; stacks are
    shared between the groups of one flush. `fp32_buffer(shape)` gives the array a cast into fp32
    fills (default: a new one); `concatenate(parts)`, a fast path's way to stack some parts
    (`fast/psum_pool.py`; None where it has none): the same values."""
    stacks = {}

    def concatenated(parts):
        if concatenate is not None:
            whole = concatenate(parts)
            if whole is not None:
                return whole
        if all(p.dtype == np.float32 for p in parts):
            # no cast: a plain new array measured faster here than a reused buffer (1024^3 fp32
            # tiled kernel, 5 runs: 30.0-33.8 ms vs 31.9-34.9 ms)
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        shape = (sum(p.shape[0] for p in parts),) + parts[0].shape[1:]
        buffer = np.empty(shape, np.float32) if fp32_buffer is None else fp32_buffer(shape)
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
        t = Tensor(self, arr.shape, dt, name, None, 0, self.with_data, fill=data)   # (written: all)
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
            written = None
        elif new_dtype == tensor.dtype:
            written = tensor.written.reshape(shape)
        else:                                   # per byte, then per element of the new type
            per_byte = np.repeat(tensor.written.reshape(-1), tensor.dtype.itemsize)
            written = per_byte.reshape(-1, new_dtype.itemsize).all(axis=1).reshape(shape)
        t.share_bytes_of(tensor, written)
        return t

    def free(self, tensor: Tensor):
        if getattr(tensor, "alias_of", None) is not None:
            tensor.mark_freed()                  # an alias owns no bytes of its own
            return
        if not tensor.freed:
            tensor.mark_freed()
            self.used -= tensor.nbytes
            self.tensors.remove(tensor)


def check_pe_result(spec: CoreSpec, dst: View, opcode: str) -> None:
    """The PSUM bank rule of a Tensor-engine result (called by nc_matmul, its double-row mode and
    nc_transpose through the PE array; also by nc_matmul_mx and the gathered matmuls, which exist
    from NeuronCore-v4 only): on NeuronCore-v2 and -v3 its dst lies in one 2 KiB bank per partition. AWS's Trainium/Inferentia2 architecture guide: "each nc_matmul can
    only write to a single PSUM bank, which can only hold 512 FP32 elements per PSUM partition", and a
    "matmul accumulation group" is matmuls "accumulating into the same PSUM bank"; nki.isa.nc_matmul
    (v2.33): "On NeuronCore-v2 and -v3, the free dimension size of moving tile must not exceed 512,
    matching the maximum number of float32 elements per PSUM bank. Starting NeuronCore-v4, [it] can go
    up to 4096 for float32 dst or 8192 for bfloat16 dst, matching the size of 8x PSUM banks (the
    entire PSUM)" -- so from v4 there is no bank rule. Other engines read and write PSUM across banks.

    The bytes are where the tensor is placed; while a kernel is traced nothing is placed yet, so they
    count from the tensor's start, which the allocator puts on a bank boundary when the tensor is
    larger than a bank (`first_fit`) -- from the tile's start for one block of a block tensor, whose
    tiles are placed one by one (`allocate.split_block_tensors`). PSUMBankError if it spans two banks."""
    t = dst.tensor
    bank = spec.psum_bank_bytes
    placed = isinstance(t.memory, OnChipMemory)
    base = (t.offset or 0) if placed else 0
    if t.kind != "psum" or base % bank + t.partition_bytes <= bank or spec.generation >= "v4":
        return                                      # the whole tensor lies in one bank
    pa = t.partition_axis
    free_shape = t.shape[:pa] + t.shape[pa + 1:]
    if dst.basic:
        box = dst.box or tuple(x for n in t.shape for x in (0, n))
        lows = [box[2 * a] for a in range(len(t.shape)) if a != pa]
        highs = [box[2 * a + 1] - 1 for a in range(len(t.shape)) if a != pa]
    else:                                           # index arrays: the elements it really writes
        coords = np.unravel_index(dst.flat_positions().ravel(), t.shape)
        offsets = np.ravel_multi_index(tuple(c for a, c in enumerate(coords) if a != pa), free_shape)
        lows, highs = np.unravel_index(int(offsets.min()), free_shape), np.unravel_index(int(offsets.max()), free_shape)
    if not placed and pa and all(lows[a] == highs[a] for a in range(pa)):
        lows, highs = [0] * pa + list(lows[pa:]), [0] * pa + list(highs[pa:])   # one tile of a block tensor
    lo = base + int(np.ravel_multi_index(tuple(int(x) for x in lows), free_shape)) * t.itemsize if free_shape else base
    hi = base + (int(np.ravel_multi_index(tuple(int(x) for x in highs), free_shape)) + 1) * t.itemsize \
        if free_shape else base + t.itemsize
    if lo // bank != (hi - 1) // bank:
        raise PSUMBankError(
            f"PSUM bank: {opcode} writes its result to bytes {lo}-{hi} per partition of {t.name!r} "
            f"({hi - lo} bytes), across banks {lo // bank}-{(hi - 1) // bank}; on {spec.name} a "
            f"Tensor-engine result lies in one PSUM bank of {bank} bytes ({bank // 4} fp32): start it "
            f"on a bank boundary or split the free dimension", value=hi - lo, limit=bank)


def moving_fmax(spec: CoreSpec, dst_dtype) -> tuple[int, str]:
    """(limit, what it is) of an nc_matmul's moving free size N (its result's columns) for a `dst_dtype`
    result, the same rule as `check_pe_result`: on NeuronCore-v2 and -v3 `spec.moving_fmax` (512, one
    bank of fp32); from NeuronCore-v4 as many columns of dst's type as the whole PSUM partition holds
    (16 KiB: 4096 fp32, 8192 bf16; nki.isa.nc_matmul, v2.33, "Tile size", quoted there)."""
    if spec.generation < "v4":
        return spec.moving_fmax, "gemm_moving_fmax"
    itemsize = dtypes.as_dtype(dst_dtype).itemsize
    return spec.psum_partition_bytes // itemsize, \
        f"the {spec.psum_partition_bytes // KiB} KiB PSUM partition of {dtypes.name(dst_dtype)} dst"


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
        self.products = None                  # fast path: products in worker threads (fast/psum_pool.py)

    def flush_pending(self, touched: Tensor | None = None):
        """Compute every deferred PSUM product now (a read wants one of them): each group of
        accumulating matmuls (`Tensor.defer_matmul`) as one product over its stacked K, in the
        order the tensors deferred them, in this thread. Fast path (`trnlab.config.fast()`,
        `fast/psum_pool.py`): the same products in parallel threads; and when `touched` (the tensor
        whose values are wanted) has its products already computing in a worker, wait for those
        only: the other tiles' groups stay pending, since a read that the values replay moved may
        come after the first matmuls of a later tile's K loop, whose group must not be cut in two
        (its sum would round differently from program order's)."""
        if touched is not None and touched.computing:
            touched.wait_computing()
            return
        if config.fast():
            from .fast.psum_pool import products
            products(self).flush(self)
            return
        tensors = list({id(t): t for t in self.pending if t._pending is not None}.values())
        self.pending = []
        stacked = stacker()
        jobs = [(t, g[0], g[1], stacked(g[2]), stacked(g[3])) for t in tensors for g in t.take_pending()]
        for t, view, overwrite, stationary, moving in jobs:     # [sum K, M], [sum K, N]
            t.apply(view, overwrite, stationary, moving)

    # the values replay's products in worker threads (fast path only: fast/psum_pool.py)
    def start_pending(self, t: Tensor) -> None:
        """Start computing `t`'s deferred products in a worker now (`psum_pool.Products.start`)."""
        from .fast.psum_pool import products
        products(self).start(self, t)

    def ready(self, t: Tensor) -> None:
        """`t`'s products start with the next `start_pending`'s (`psum_pool.Products.ready`)."""
        from .fast.psum_pool import products
        products(self).ready(t)

    @property
    def capacity(self) -> int:
        return self.partitions * self.partition_bytes

    @property
    def used_partition_bytes(self) -> int:
        return sum(t.partition_bytes for t in self.tensors)

    def check_tile(self, shape, dtype, name: str | None = None, partition_axis: int = 0):
        """The rules of a tile's shape alone (no placement): partitions <= 128 and, in PSUM, a plain
        tensor within the whole PSUM (it may span banks). Returns (shape, dtype, partition_axis, bytes
        per partition)."""
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
        if self.bank_bytes is not None and partition_axis == 0 and per_partition > self.partition_bytes:
            # a plain PSUM tensor wider than all 8 banks can never be placed (a block tensor's tiles
            # may be placed one by one: allocate.split_block_tensors)
            raise self.overflow(per_partition, name, used=0)
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
            self._retire(tensor)
            tensor.release()
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
