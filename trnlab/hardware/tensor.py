"""Tensors (allocations in HBM, SBUF or PSUM) and views (the region one instruction touches).

A `Tensor` is one allocation. On-chip tensors have a *partition axis* (NKI's ``par_dim``; axis 0
unless said otherwise): engines touch all partitions in the same cycle, so only the free axes cost
time [ARCH-v2]. ``tensor[index]`` gives a `View` with NumPy indexing semantics (ints, slices, integer
arrays — what NKI access patterns lower to). A view knows:

- its shape, dtype and bytes;
- its *box*: the bounding box of the elements it touches, per tensor axis, used by the scheduler to
  find instructions that touch overlapping memory (RAW, WAR, WAW);
- for on-chip tensors, its partitions (start, count) and free size (elements per partition).

In full mode a tensor holds its values in a NumPy array (``.data``) plus a mask of the elements
ever written, so that reading memory never written raises `UninitializedReadError`. The few
instructions whose output elements each depend on known input elements (`nc_matmul`: a result
column on its moving column, a row on its stationary column; `tensor_copy`: element on element) do
not raise: they write garbage where it goes, marked in the tensor's ``poison`` mask (as on the chip,
where a kernel may compute on padding it masks out later), and a read of poisoned elements by any
other instruction — a store to HBM, most of all — raises, naming where the garbage came from.
In timing mode ``.data`` is None and nothing is computed.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .errors import (FreedTensorError, IndexError_, PartitionStrideError,
                     UninitializedReadError)
from .dependencies import overlap as _overlap

GROUP_K_MAX = 8192      # a deferred PSUM group is computed once its stacked K reaches this (memory bound)


class PrototypeMemory:
    """The memory a prototype tensor claims to be in: a tensor of a buffer's shape, dtype and
    memory kind that holds no values (plans parse each operand's index on one once)."""

    def __init__(self, kind: str):
        self.kind = kind


class Tensor:
    """One allocation. Create through ``core.hbm/sbuf/psum.allocate(...)`` or ``core.hbm.tensor(...)``."""

    __slots__ = ("name", "shape", "dtype", "memory", "kind", "partition_axis", "_data", "written",
                 "_pending",
                 "offset", "partition_bytes", "freed", "version", "_shared",
                 "_reads", "_writes", "full", "itemsize", "nbytes", "_unpoisoned", "alias_of", "poison",
                 "poison_origin", "lnc",
                 "__weakref__")

    def __init__(self, memory, shape, dtype, name, partition_axis, offset, with_data, fill=None):
        self.memory = memory
        self.kind = memory.kind                     # "hbm" | "sbuf" | "psum"
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name
        self.partition_axis = partition_axis        # None for HBM
        self.offset = offset                        # byte offset in the free dimension (on-chip)
        self.itemsize = self.dtype.itemsize
        self.nbytes = math.prod(self.shape) * self.itemsize
        if partition_axis is None:
            self.partition_bytes = self.nbytes
        else:
            self.partition_bytes = self.nbytes // max(self.shape[partition_axis], 1)
        self.freed = False
        self.alias_of = None                        # HBM: the tensor whose bytes this one reshapes
        self.version = 0                            # bumped on every write (both modes)
        self._shared = False                        # _data is held by a deferred matmul (copy on write)
        self._reads = []                            # scheduler records: (box, end_ns, index)
        self._writes = []                           # (box, ready_ns, index, by_matmul)
        self._pending = None                        # deferred PSUM accumulation (see flush)
        self.poison = None                          # full mode: elements holding garbage (bool mask)
        self.poison_origin = ""                     # where that garbage was first read
        self.lnc = None                             # HBM: the launch's SharedHBM if both cores of LNC=2 share it
        # A new tensor's garbage (NaN poison) is filled in lazily, only where still unwritten when
        # its values are first read through `data`: most tensors are fully written before that.
        self._unpoisoned = False
        if with_data:
            if fill is None:
                self._data = np.empty(self.shape, dtype=self.dtype)
                self.written = np.zeros(self.shape, dtype=bool)
                self._unpoisoned = True
            else:
                self.data = fill
                self.written = None                 # None: every element written
        else:
            self.data = None
            self.written = None
        self.full = View(self, None)

    # -- indexing ---------------------------------------------------------------------------
    def __getitem__(self, index) -> "View":
        return View(self, index)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def partitions(self) -> int:
        return 1 if self.partition_axis is None else self.shape[self.partition_axis]

    def numpy(self) -> np.ndarray:
        """A copy of the values (full mode)."""
        return self.full.read()

    def __repr__(self) -> str:
        par = "" if self.partition_axis is None else f", partition_axis={self.partition_axis}"
        return (f"Tensor({self.name!r}, {self.kind}, shape={self.shape}, "
                f"dtype={dtypes.name(self.dtype)}{par})")

    # -- values (full mode) -------------------------------------------------------------------
    @property
    def data(self):
        """The values (NumPy array in the tensor's dtype); None in timing mode."""
        if self._pending is not None:
            self.memory.flush_pending(self)
        if self._unpoisoned:
            self._poison()
        return self._data

    def _poison(self):
        """Fill the never-written elements with the poison value (NaN for floats)."""
        self._unpoisoned = False
        if self.written is not None and self._data is not None:
            np.copyto(self._data, dtypes.poison(self.dtype), where=~self.written)

    @data.setter
    def data(self, value):
        self._data = value

    def snapshot(self, view: "View") -> tuple:
        """An immutable handle on `view`'s current values for a deferred matmul: the array itself,
        which the next write replaces instead of changing (copy on write)."""
        self._shared = True
        whole = self.partition_axis == 0 and len(self.shape) == 2 and view.part_start == 0 \
            and view.partitions == self.shape[0] and view.basic
        return (self._data, view.index, view.partitions, whole)

    def defer_matmul(self, view: "View", stationary: tuple, moving: tuple, accumulate: bool):
        """Record ``view (+)= stationary.T @ moving`` (snapshots, see `snapshot`) without computing.

        Consecutive matmuls accumulating into the same PSUM region are computed together, as one
        larger product over the concatenated K, when anything next touches the tensor's values
        (`data`). Disjoint regions of one tensor (e.g. the tiles of a ``[n, 128, 512]`` PSUM
        array) keep separate groups. The result is the same fp32 accumulation; only the order of
        the additions inside a group may differ (rounding at the level of one fp32 ulp). This
        turns many small BLAS calls into few large ones, which keeps full mode near NumPy's speed.
        """
        groups = self._pending
        if groups is not None and type(groups) is not dict:     # products computing (psum_pool)
            self.memory.flush_pending(self)
            groups = self._pending
        box = view.box
        group = None
        if groups is not None:
            group = groups.get(box)
            if group is None and any(b is None or box is None or _overlap(b, box) for b in groups):
                self.memory.flush_pending()         # an overlapping region: finish the others
                groups = None
            elif group is not None and not accumulate:
                group = None                        # the same region overwritten: drop the group
        if groups is None:
            groups = self._pending = {}
            self.memory.pending.append(self)
        if group is None:
            groups[box] = [view, not accumulate, [stationary], [moving], stationary[2]]
        else:
            group[2].append(stationary)
            group[3].append(moving)
            group[4] += stationary[2]
            if group[4] >= GROUP_K_MAX:
                self.memory.flush_pending()

    def take_pending(self) -> list:
        """Remove and return the deferred groups: [view, overwrite, stationaries, movings, K]."""
        groups = self._pending
        self._pending = None
        return [] if groups is None else list(groups.values())

    def apply(self, view: "View", overwrite: bool, stationary: np.ndarray, moving: np.ndarray):
        """Add (or store) one deferred group's product, given its K-stacked fp32 operands."""
        out = self._data if view.index is None else self._data[view.index]
        if overwrite and out.dtype == np.float32 and out.shape == (stationary.shape[1], moving.shape[1]) \
                and out.flags.c_contiguous:
            with np.errstate(invalid="ignore", over="ignore"):
                np.matmul(stationary.T, moving, out=out)     # the same BLAS call, no temporary
            return
        with np.errstate(invalid="ignore", over="ignore"):   # garbage (NaN) in padding is allowed
            product = (stationary.T @ moving).reshape(out.shape)
        self.add_product(view, overwrite, product, out)

    def add_product(self, view: "View", overwrite: bool, product: np.ndarray, out: np.ndarray | None = None):
        """Add (or store) a deferred group's computed fp32 product into `view`."""
        if out is None:
            out = self._data if view.index is None else self._data[view.index]
            product = product.reshape(out.shape)
        if out.dtype != np.float32:                 # bf16 PSUM (v4): the group's sum stays fp32
            if not overwrite:
                product += out.astype(np.float32)
            out[...] = product.astype(out.dtype)
        elif overwrite:
            out[...] = product
        else:
            out += product

    def fp32(self) -> np.ndarray:
        """The whole tensor as float32 (bf16 -> fp32 is exact)."""
        return np.asarray(self.data, dtype=np.float32)

    # -- a tensor's life: the only code that sets its values' fields outside a write ---------------
    def fill_partly(self, values: np.ndarray, written: np.ndarray) -> None:
        """Hold `values`, of which only the `written` elements were written (the rest reads as
        poison, or raises when checked)."""
        self._data = values
        self.written = written
        self._unpoisoned = True

    def share_bytes_of(self, tensor: "Tensor", written) -> None:
        """This HBM tensor is another shape of `tensor`'s bytes (`HBM.alias`), with `written` its
        written-mask (None: every element written)."""
        self.alias_of = tensor
        self.written = written

    def mark_freed(self) -> None:
        """Freed from HBM (whose values stay readable: a launch's outputs)."""
        self.freed = True

    def release(self) -> None:
        """Freed by its memory (`OnChipMemory.free`): the values go now (caches elsewhere may still
        hold the Tensor object)."""
        self.freed = True
        self._pending = None
        self._data = None
        self.written = None
        self.poison = None

    def reset(self) -> None:
        """A values tile placed again (the values replay): fresh memory, nothing written (as
        `fresh_like`)."""
        self._abandon_computing()
        self.freed = False
        self.version = 0
        self._shared = False
        self._pending = None
        self._data = np.empty(self.shape, dtype=self.dtype)
        self.written = np.zeros(self.shape, dtype=bool)
        self._unpoisoned = True

    def written_whole(self, data: np.ndarray, shared: bool) -> None:
        """A values tile placed (as `reset`) and written whole (as `View.write`) with `data`;
        `shared`: the array is another tensor's (copy on write)."""
        self.freed = False
        self.version = 0
        self._data = data
        self._shared = shared
        self.poison = None
        self.written = None
        self._unpoisoned = False

    def hand_over(self) -> None:
        """Its values array now belongs to another tile (a PSUM tile moved into SBUF at its last use,
        `ValuesCore.tensor_copy_moving`): this tile keeps none."""
        self._data = None

    def drop(self) -> None:
        """A values tile's end (`release` without a memory's bookkeeping): its values go; the tile
        object stays with the program's bound values plan for the next run. (Fresh tile objects per
        run were reference cycles with their `full` views: at batch 64 ~90,000 objects of garbage
        per run for the cyclic collector, 0.1-0.25 s.)"""
        self._abandon_computing()
        self.freed = True
        self._pending = None
        self._shared = False
        self._data = None
        self.written = None

    # deferred products computing in a worker thread (fast path: hardware/fast/psum_pool.py)
    @property
    def computing(self) -> bool:
        """Are this tensor's deferred products being computed by a worker (`start_computing`)?"""
        return self._pending is not None and type(self._pending) is not dict

    def start_computing(self, computing) -> None:
        """Its deferred groups (taken by `take_pending`) are being computed: `computing.wait()`
        returns once they are in."""
        self._pending = computing

    def wait_computing(self) -> None:
        computing = self._pending
        computing.wait()
        if self._pending is computing:
            self._pending = None

    def _abandon_computing(self) -> None:
        if self.computing:              # never read: dropped if not started, else let it end
            self._pending.abandon()


_new_view = object.__new__


def fresh_like(proto: Tensor, memory) -> Tensor:
    """A new full-mode tensor in `memory` with the shape, dtype, name, partition axis and offset of
    `proto` (a tensor of the same buffer, e.g. of an earlier replay): no values written yet (NaN
    poison where read unwritten, as `Tensor(...)`), without recomputing what the shape implies."""
    t = _new_view(Tensor)
    t.name, t.shape, t.dtype, t.kind = proto.name, proto.shape, proto.dtype, proto.kind
    t.partition_axis, t.offset, t.itemsize = proto.partition_axis, proto.offset, proto.itemsize
    t.nbytes, t.partition_bytes = proto.nbytes, proto.partition_bytes
    t.memory = memory
    t.freed = False
    t.alias_of = None
    t.version = 0
    t._shared = False
    t._reads = []
    t._writes = []
    t._pending = None
    t.poison, t.poison_origin = None, ""
    t.lnc = None
    t._data = np.empty(t.shape, dtype=t.dtype)
    t.written = np.zeros(t.shape, dtype=bool)
    t._unpoisoned = True
    t.full = proto.full.on(t)
    return t


def unravel(flat, shape) -> tuple:
    """The coordinates in `shape` of row-major positions `flat` (np.unravel_index's result).

    Computed by division: NumPy 2.4's np.unravel_index returns wrong coordinates for an index array of
    more than 8192 elements whose last axis has size 1 (e.g. an access pattern ending in [0, 1])."""
    flat = np.asarray(flat, dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= math.prod(shape)):
        raise ValueError(f"index {int(flat.max()) if flat.max() >= math.prod(shape) else int(flat.min())} "
                         f"is out of bounds for array with size {math.prod(shape)}")
    coords = []
    for n in reversed(tuple(shape)):
        coords.append(flat % n)
        flat = flat // n
    return tuple(reversed(coords))


def _bounds_error(tensor, axis, value, n):
    return IndexError_(f"index out of range: index {value} on axis {axis} of {tensor.name!r} "
                       f"with size {n}", value=value, limit=n)


class View:
    """The region of a tensor that one instruction reads or writes (``tensor[index]``)."""

    __slots__ = ("tensor", "index", "shape", "box", "part_start", "partitions", "free_size",
                 "part_first", "size", "nbytes", "basic")

    def __init__(self, tensor: Tensor, index):
        self.tensor = tensor
        shape = tensor.shape
        pa = tensor.partition_axis
        if index is None or index is Ellipsis or (type(index) is tuple and len(index) == 0):
            self.index = None
            self.shape = shape
            self.box = None
            self.basic = True
            if pa is None:
                self.part_start, self.partitions, self.part_first = 0, 1, True
            else:
                self.part_start, self.partitions, self.part_first = 0, shape[pa], pa == 0
        elif (type(index) is tuple and len(index) == 2 and len(shape) == 2
              and type(index[0]) is slice and type(index[1]) is slice
              and index[0].step is None and index[1].step is None):
            # fast path: t[a:b, c:d], the access of almost every tiled kernel
            n0, n1 = shape
            lo0, hi0, _ = index[0].indices(n0)
            lo1, hi1, _ = index[1].indices(n1)
            if hi0 < lo0:
                hi0 = lo0
            if hi1 < lo1:
                hi1 = lo1
            if lo0 == 0 and hi0 == n0 and lo1 == 0 and hi1 == n1:
                self.index = self.box = None            # the whole tensor
            else:
                self.index = index
                self.box = (lo0, hi0, lo1, hi1)
            self.shape = (hi0 - lo0, hi1 - lo1)
            self.basic = True
            if pa is None:
                self.part_start, self.partitions, self.part_first = 0, 1, True
            elif pa == 0:
                self.part_start, self.partitions, self.part_first = lo0, hi0 - lo0, True
            else:
                self.part_start, self.partitions = lo1, hi1 - lo1
                self.part_first = False
        else:
            if type(index) is not tuple:
                index = (index,)
            self._parse(index)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * tensor.itemsize
        if pa is None:
            self.free_size = self.size
        else:
            self.free_size = self.size // self.partitions if self.partitions else 0

    # Basic indexing (ints and slices) is parsed by hand: it is the hot path of every instruction.
    def _parse(self, index):
        tensor = self.tensor
        shape = tensor.shape
        ndim = len(shape)
        for k, i in enumerate(index):
            if i is Ellipsis:
                fill = ndim - (len(index) - 1)
                index = index[:k] + (slice(None),) * fill + index[k + 1:]
                break
        if len(index) > ndim:
            raise IndexError_(f"index out of range: {len(index)} indices for {ndim}-d tensor "
                              f"{tensor.name!r}", value=len(index), limit=ndim)
        if len(index) < ndim:
            index = index + (slice(None),) * (ndim - len(index))
        pa = tensor.partition_axis
        out_shape = []
        box = []
        basic = True
        full = True
        part_pos = None        # position of the partition axis in the view's shape
        for axis, (i, n) in enumerate(zip(index, shape)):
            ti = type(i)
            if ti is slice:
                start, stop, step = i.indices(n)
                length = len(range(start, stop, step))
                if length == 0:
                    lo = hi = start
                elif step > 0:
                    lo, hi = start, start + (length - 1) * step + 1
                else:
                    lo, hi = start + (length - 1) * step, start + 1
                if axis == pa:
                    if step != 1 and length > 1:
                        raise PartitionStrideError(
                            f"partition stride: step {step} on the partition axis of "
                            f"{tensor.name!r}; engines read consecutive partitions (step 1)",
                            value=step, limit=1)
                    part_pos = len(out_shape)
                out_shape.append(length)
                box.append(lo)
                box.append(hi)
                if lo != 0 or hi != n:
                    full = False
            elif ti is int or isinstance(i, (int, np.integer)):
                i = int(i)
                if i < 0:
                    i += n
                if not 0 <= i < n:
                    raise _bounds_error(tensor, axis, i, n)
                box.append(i)
                box.append(i + 1)
                if n != 1:
                    full = False
            else:
                basic = False
                break
        if basic:
            self.index = index
            self.shape = tuple(out_shape)
            self.box = None if full else tuple(box)
            self.basic = True
            if pa is None:
                self.part_start, self.partitions, self.part_first = 0, 1, True
            else:
                self.part_start = box[2 * pa]
                self.partitions = box[2 * pa + 1] - box[2 * pa]
                self.part_first = part_pos in (0, None)
            return
        self._parse_advanced(index)

    def _parse_advanced(self, index):
        """Integer-array indexing: NumPy decides the shape; the box is the bounding box."""
        tensor = self.tensor
        shape = tensor.shape
        pa = tensor.partition_axis
        fixed = []
        box = []
        for axis, (i, n) in enumerate(zip(index, shape)):
            if type(i) is slice:
                start, stop, step = i.indices(n)
                r = range(start, stop, step)
                lo, hi = (min(r[0], r[-1]), max(r[0], r[-1]) + 1) if len(r) else (start, start)
                fixed.append(i)
            else:
                arr = np.asarray(i)
                if arr.dtype.kind not in "iu":
                    raise IndexError_(f"index out of range: index arrays must be integers, got "
                                      f"{arr.dtype} on axis {axis} of {tensor.name!r}",
                                      value=str(arr.dtype), limit="int")
                if arr.size:
                    # a broadcast array (zero strides: an access pattern's) repeats its lines: reduce those
                    lines = arr[tuple(0 if st == 0 else slice(None) for st in arr.strides)] if 0 in arr.strides else arr
                    amin, amax = int(lines.min()), int(lines.max())
                    if amin < -n or amax >= n:
                        raise _bounds_error(tensor, axis, amax if amax >= n else amin, n)
                    if amin < 0:                # negative indices count from the end
                        arr = np.where(arr < 0, arr + n, arr)
                        lines = np.where(lines < 0, lines + n, lines)
                        lo, hi = int(arr.min()), int(arr.max()) + 1
                    else:
                        lo, hi = amin, amax + 1
                else:
                    lo = hi = 0
                if axis == pa and arr.size:
                    uniq = np.unique(lines)     # the partitions read: each line once, not every repeat
                    if len(uniq) != hi - lo:
                        raise PartitionStrideError(
                            f"partition stride: partitions {uniq[:8].tolist()}... of "
                            f"{tensor.name!r} are not consecutive; engines read consecutive "
                            f"partitions", value=uniq.tolist(), limit="consecutive")
                fixed.append(arr)
            box.append(lo)
            box.append(hi)
        index = tuple(fixed)
        self.index = index
        if all(type(i) is np.ndarray for i in index) and len(index) == len(shape):
            self.shape = np.broadcast_shapes(*(i.shape for i in index))   # every axis indexed by an array
        else:                           # slices among the arrays: NumPy's rules place the axes
            dummy = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape,
                                                    strides=(0,) * len(shape))
            self.shape = dummy[index].shape
        self.box = tuple(box)
        self.basic = False
        if pa is None:
            self.part_start, self.partitions, self.part_first = 0, 1, True
        else:
            self.part_start = box[2 * pa]
            self.partitions = box[2 * pa + 1] - box[2 * pa]
            self.part_first = bool(self.shape) and self.shape[0] == self.partitions

    # -- properties ----------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self.tensor.dtype

    @property
    def memory(self) -> str:
        return self.tensor.kind

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index) -> "View":
        """Index a view further (only for whole-tensor views, else index the tensor directly)."""
        if self.index is None:
            return View(self.tensor, index)
        raise TypeError("index the tensor in one go: tensor[a, b], not tensor[a][b]")

    def __repr__(self) -> str:
        return f"View({self.tensor.name!r}[{self._index_str()}], shape={self.shape})"

    def _index_str(self) -> str:
        if self.index is None:
            return ":"
        parts = []
        for i in self.index:
            if type(i) is slice:
                parts.append(f"{'' if i.start is None else i.start}:{'' if i.stop is None else i.stop}"
                             + ("" if i.step in (None, 1) else f":{i.step}"))
            elif isinstance(i, np.ndarray):
                parts.append(f"<array {i.shape}>")
            else:
                parts.append(str(i))
        return ", ".join(parts)

    # -- values (full mode) -----------------------------------------------------------------------
    def check_live(self):
        if self.tensor.freed:
            raise FreedTensorError(f"use after free: tensor {self.tensor.name!r} was freed",
                                   value=self.tensor.name, limit="live tensor")

    def check_initialized(self):
        """Raise UninitializedReadError if any element of this view holds garbage computed from memory
        never written (the tensor's ``poison``: named by where it was first read), or was never written."""
        t = self.tensor
        if t.poison is not None:
            mask = t.poison if self.index is None else t.poison[self.index]
            if mask.any():
                bad = int(np.count_nonzero(mask))
                first = np.argwhere(np.asarray(mask))[0].tolist() if mask.ndim else []
                raise UninitializedReadError(
                    f"uninitialized read: {bad} of {mask.size} elements of {t.name!r}[{self._index_str()}] "
                    f"hold garbage computed from memory never written (first at view position {first}; "
                    f"{t.poison_origin})", value=bad, limit=0)
        if t.written is not None:
            mask = t.written if self.index is None else t.written[self.index]
            if mask.all():
                if self.index is None:
                    _all_written(t)             # nothing left to poison or check on later reads
            else:
                missing = int(mask.size - np.count_nonzero(mask))
                first = np.argwhere(~np.asarray(mask))[0].tolist() if mask.ndim else []
                raise UninitializedReadError(
                    f"uninitialized read: {missing} of {mask.size} elements of {t.name!r}"
                    f"[{self._index_str()}] were never written (first at view position {first}); "
                    f"new {t.kind.upper()} memory holds garbage (NaN here)", value=missing, limit=0)

    def undefined(self):
        """The elements of this view never written or holding garbage (a bool array of the view's
        shape), or None if every one is defined."""
        t = self.tensor
        mask = None
        if t.written is not None:
            written = t.written if self.index is None else t.written[self.index]
            if not written.all():
                mask = ~np.asarray(written)
        if t.poison is not None:
            poison = t.poison if self.index is None else t.poison[self.index]
            if poison.any():
                mask = np.asarray(poison) if mask is None else mask | poison
        return None if mask is None else np.asarray(mask).reshape(self.shape)

    def mark_unwritten(self, mask) -> None:
        """Mark the elements of this HBM view where `mask` (the view's shape) is True as not written
        (garbage stored there defines nothing: a launch's cores merge only what each wrote). A reshaped
        alias of the tensor shares the mask; one of another dtype (a derived mask) does not see it."""
        t = self.tensor
        if t.written is None:
            t.written = np.ones(t.shape, dtype=bool)
        if self.index is None:
            t.written &= ~np.reshape(mask, t.shape)
        else:
            t.written[self.index] = t.written[self.index] & ~np.reshape(mask, self.shape)
        t._unpoisoned = True

    def set_poison(self, mask, origin: str) -> None:
        """Mark the elements of this view where `mask` (the view's shape) is True as garbage, and
        the others as clean (call after writing the view)."""
        t = self.tensor
        if mask is None or not mask.any():
            if t.poison is not None:
                if self.index is None:
                    t.poison = None
                else:
                    t.poison[self.index] = False
            return
        if t.poison is None:
            t.poison = np.zeros(t.shape, dtype=bool)
            t.poison_origin = origin
        if self.index is None:
            t.poison[...] = np.reshape(mask, t.shape)
        else:
            t.poison[self.index] = np.reshape(mask, self.shape)

    def read(self) -> np.ndarray:
        """A copy of the values (checks that they were written)."""
        self.check_live()
        self.check_initialized()
        t = self.tensor
        if t.data is None:
            raise RuntimeError("timing mode keeps no values")
        return np.array(t.data if self.index is None else t.data[self.index])

    def values(self) -> np.ndarray:
        """The values without a copy where possible (callers must not modify)."""
        t = self.tensor
        return t.data if self.index is None else t.data[self.index]

    def fp32(self) -> np.ndarray:
        """The values as float32 (cached per tensor version)."""
        whole = self.tensor.fp32()
        return whole if self.index is None else whole[self.index]

    def write(self, values: np.ndarray):
        """Store values (already of the tensor's dtype and this view's shape) and mark them written."""
        t = self.tensor
        if t.lnc is not None:                       # both cores of LNC=2 write it (shared_hbm.py)
            t.lnc.writing(self, values)
        if t._shared:                               # a deferred matmul holds the old array
            t._data = np.empty_like(t._data) if self.index is None else t._data.copy()
            t._shared = False
        if t._pending is not None:
            t.memory.flush_pending(t)
        if t.poison is not None:
            self.set_poison(None, "")
        if self.index is None:
            t._data[...] = values
            _all_written(t)
            t._unpoisoned = False
        else:
            t._data[self.index] = values
            if t.written is not None:
                t.written[self.index] = True
                if self.size * 8 >= t.written.size and t.written.all():
                    _all_written(t)

    def flat_positions(self) -> np.ndarray:
        """The row-major element offset in its tensor of each element of this view (an int64 array
        of the view's shape): what an access pattern's [[stride, count], ...] walks. Each axis's
        coordinate is read through the view's own index from a stride-0 array of the tensor's shape,
        so any NumPy index (ints, slices, index arrays) works and nothing of the tensor's size is made."""
        t = self.tensor
        index = self.index if self.index is not None else (slice(None),) * t.ndim
        flat = np.zeros((), dtype=np.int64)
        stride = 1
        for axis in range(t.ndim - 1, -1, -1):
            n = t.shape[axis]
            coords = np.lib.stride_tricks.as_strided(np.arange(n, dtype=np.int64), shape=t.shape,
                                                     strides=tuple(8 if k == axis else 0 for k in range(t.ndim)))
            flat = flat + coords[index] * stride
            stride *= n
        return np.asarray(flat, dtype=np.int64).reshape(self.shape)

    def on(self, tensor: Tensor) -> "View":
        """This view's index on another tensor of the same shape, dtype and partition axis (a
        replay's fresh tensor), without parsing the index again."""
        v = _new_view(View)
        v.tensor = tensor
        v.index, v.shape, v.box, v.basic = self.index, self.shape, self.box, self.basic
        v.part_start, v.partitions, v.part_first = self.part_start, self.partitions, self.part_first
        v.size, v.nbytes, v.free_size = self.size, self.nbytes, self.free_size
        return v

    def mark_written(self):
        t = self.tensor
        if t.poison is not None:
            self.set_poison(None, "")
        if t.written is None:
            return
        if self.index is None:
            _all_written(t)
        else:
            t.written[self.index] = True
            if self.size * 8 >= t.written.size and t.written.all():
                _all_written(t)


def _all_written(t: Tensor) -> None:
    """Every element of `t` is written: drop its mask. An HBM tensor may share its mask with a
    reshaped alias (`HBM.alias`), so there the mask is filled, not dropped, and the other sees it."""
    if t.written is not None and t.kind == "hbm":
        t.written[...] = True
    t.written = None


def as_view(x) -> View:
    """Accept a Tensor (meaning all of it) or a View."""
    if type(x) is View:
        return x
    if type(x) is Tensor:
        return x.full
    raise TypeError(f"expected a Tensor or View, got {type(x).__name__}")
