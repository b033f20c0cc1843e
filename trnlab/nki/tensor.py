"""`NkiTensor`: what a kernel holds — a tensor in HBM, SBUF or PSUM, or a view (tile) of one.

An allocation (`nl.ndarray(..., buffer=nl.sbuf)`, a kernel argument) owns a `trnlab.hardware` tensor.
Indexing gives views: plain ints and slices compose into one index on the owner; `nl.arange`/`nl.mgrid`
expressions give an *access pattern* that is resolved when an instruction runs (so that a `mask=` can
shrink it first). `hw_view` turns any of them into the hardware `View` an instruction reads or writes.

A tile produced by a functional call (`nl.exp(x)`, `nisa.nc_matmul(a, b)`) starts *pending*: its
instruction is issued into wherever the program puts it (`out[...] = ...`, `psum += ...`) or, at the
next instruction, into a fresh tile of its own (see launches.py).

Kernels are traced (`trnlab.hardware.trace`): an on-chip allocation is a buffer of the program, and
its memory is given by liveness afterwards (`trnlab.hardware.allocate`) — from the first to the last
instruction that touches it, as NKI's compiler does — however long Python keeps the object.
"""
from __future__ import annotations

import math

import numpy as np

from trnlab import config as _config
from trnlab.hardware import dtypes as _dtypes
from trnlab.hardware.errors import DtypeError, OutOfBoundsError, ShapeMismatchError
from trnlab.hardware.indirection import ACCEPTS as _ACCEPTS   # the instructions that read a register offset
from trnlab.hardware.tensor import unravel
from trnlab.nki import indexing
from trnlab.nki import tensor_views as _views
from trnlab.nki.errors import NKIError, ViewError, locate
from trnlab.nki.indexing import IndexExpr
from trnlab.nki import loops as _loops
from trnlab.nki.loop_index import plain, plain_key

ON_CHIP = ("sbuf", "psum")
HBM_KINDS = ("hbm", "shared_hbm", "private_hbm")


class NkiTensor:
    __slots__ = ("shape", "dtype", "buffer", "name", "_owner", "_hw", "_index", "_ap", "_emit",
                 "_launch", "_view_cache", "_storage", "_views", "_valid", "_valid_iterator", "_gather",
                 "_rotate", "_block", "_dynamic", "_bitcast", "_bytes_of", "_invalid", "_lazy", "__weakref__")

    def __init__(self, shape, dtype, buffer, name=""):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.buffer = buffer          # "sbuf" | "psum" | "hbm" | "shared_hbm" | "private_hbm"
        self.name = name
        self._owner = None            # the allocation this is a view of (None: this is the allocation)
        self._hw = None               # the hardware Tensor of the owner
        self._index = None            # tuple of ints/slices on the owner, or None for all of it
        self._ap = None               # access pattern: tuple of (expr|int, start, step, extent) per owner axis
        self._emit = None             # pending: callable(dst NkiTensor, accumulate) issuing the instruction
        self._launch = None
        self._view_cache = None
        self._storage = None          # shape in memory when it differs (reductions keep size-1 axes)
        self._views = None            # HBM tensors: slice views already made (tiles are re-read often)
        self._valid = None            # (lo, hi): the rows a masked functional call wrote (isa._ranges)
        self._valid_iterator = None   # the partition iterator naming those rows in an access pattern
        self._gather = None           # indirect access table[ids_tile, ...]: the SBUF tile of row indices
        self._rotate = None           # direct allocation: per block axis, how many physical tiles it rotates over
        self._block = None            # a view of one block of such an allocation: (physical, logical) block index
        self._dynamic = None          # indirect view: (SBUF tile of offsets, element stride, one per row?) (tensor_views)
        self._bitcast = None          # an on-chip tile's bytes read as another element size: the view of
        #                               the whole elements it covers (tensor_views.bytes_view; DMAs move it)
        self._bytes_of = None         # a .view(dtype) tile or a view of one: (the tile whose bytes it reads, its
        #                               elements' positions there in units of its own type) (tensor_views.retype)
        self._invalid = None          # an .ap() past its tensor: the error an instruction using it raises
        self._lazy = None             # lazily initialized (language_tiles.zeros): fills a view's blocks first

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def allocation(cls, hw, buffer, launch, shape=None):
        t = cls(hw.shape if shape is None else shape, hw.dtype, buffer, hw.name)
        t._hw, t._launch = hw, launch   # _owner stays None: no self-reference, so refcounting frees it
        if buffer not in ON_CHIP:
            t._views = {}
        return t

    @classmethod
    def pending(cls, shape, dtype, buffer, emit, launch):
        t = cls(shape, dtype, buffer)
        t._emit, t._launch = emit, launch
        launch.flush()
        launch.pending = t
        return t

    def _materialize(self) -> None:
        """Issue a pending instruction into a fresh allocation of this tile's own."""
        emit, self._emit = self._emit, None
        shape = self.shape
        try:
            owner = _OPERATIONS.allocate(self._storage or shape, self.dtype, self.buffer, "t", self._launch)
        except Exception as error:
            raise locate(error, getattr(emit, "site", None))
        self._become(owner)
        self.shape = shape
        emit(self, None)

    def _become(self, other: "NkiTensor") -> None:
        """Make this object another name for `other` (a pending result that was written elsewhere)."""
        self._owner, self._hw, self._index, self._ap = other._base(), other._hw, other._index, other._ap
        self.shape, self.dtype, self.buffer, self._view_cache = other.shape, other.dtype, other.buffer, None

    def _base(self) -> "NkiTensor":
        return self if self._owner is None else self._owner

    # -- basic properties -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements the view covers: the product of its shape (`size: int`, an attribute of
        AWS's nki.language.NkiTensor page, as numpy.ndarray.size; a `.view(dtype)` scales it with the last
        axis)."""
        return math.prod(self.shape)

    @property
    def strides(self) -> tuple:
        """Each dimension's stride in elements of the storage, in the order of `shape` (`strides:
        tuple[int, ...]`, an attribute of AWS's nki.language.NkiTensor page, whose get_pattern "pairs each
        of the view's dimensions with its current stride, in the same order as shape / strides"): the
        strides of `get_pattern()`."""
        return tuple(stride for stride, _ in self.get_pattern())

    @property
    def data(self) -> "NkiTensor":
        """The tensor itself, as an instruction operand: what `.data` of a tile grid gives (`NkiGrid.data`),
        so kernel code reads the same for a grid and a tensor (AWS's nki.language.NkiTileGrid page's example
        takes `.data` of an `nl.ndarray` tile; ASSUMED: the tensor unchanged, AWS's NkiTensor page lists no
        such attribute)."""
        return self

    @property
    def is_pending(self) -> bool:
        return self._emit is not None

    def __repr__(self) -> str:
        state = "pending" if self._emit else self.buffer
        return f"NkiTensor({self.name or '?'}, shape={self.shape}, dtype={self.dtype}, {state})"

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        raise TypeError("iterate over tiles with nl.affine_range(n) and index them, not over the tensor")

    def __bool__(self):
        """A tensor is a Python object at trace time: true, as AWS's NkiTensor (which defines no truth
        value), so ``if bias:`` tests that an optional tensor was given. The result of a functional call
        (``if nl.greater(a, b):``) is a value only the chip computes: refused."""
        if self._emit is not None:
            raise NKIError("the result of an instruction has no truth value during tracing (the chip computes "
                           "it); compare with nl.greater / nl.where, or select with a mask")
        return True

    # -- indexing ---------------------------------------------------------------------
    def _ready(self) -> "NkiTensor":
        if self._emit is not None:
            launch = self._launch
            if launch.pending is self:
                launch.pending = None
            self._materialize()
        return self

    def __getitem__(self, key) -> "NkiTensor":
        view = self._view_of(key)
        owner = self._base()
        if owner._lazy is not None:                # nl.zeros(..., lazy_initialization=True)
            owner._lazy(view)
        return view

    def _view_of(self, key) -> "NkiTensor":
        if self._emit is not None:
            self._ready()
        if self._invalid is not None:
            raise self._invalid
        if self._bytes_of is not None:          # a .view(dtype) tile indexed as a tile of its own type
            key = _expand_ellipsis(plain_key(key if type(key) is tuple else (key,)), self.ndim)
            return _views.from_positions(self, _views.positions(self)[key], "indexing")
        if self._bitcast is not None:
            raise ViewError(_views.BYTES_VIEW_RULE.format(name=self.name, dtype=_dtypes.name(self.dtype),
                                                          own=_dtypes.name(self._bitcast.dtype)))
        key = plain_key(key if type(key) is tuple else (key,))   # loop indices: their values (loop_index.py)
        if any(_is_register(k) for k in key):    # t[s]: a run-time NkiScalar / register index
            return _views.run_time_index(self, _expand_ellipsis(key, self.ndim), _is_register)
        if key and isinstance(key[0], NkiTensor):
            return self._indirect(key)
        if self.buffer in HBM_KINDS and any(type(k) is NkiTensor for k in key):
            # table[b, ids_tile, i_f]: leading integers pick a sub-table, then rows by the tile
            at = next(i for i, k in enumerate(key) if type(k) is NkiTensor)
            if not all(isinstance(k, (int, np.integer)) for k in key[:at]):
                raise NKIError("indirect indexing: only integers may come before the tile of row indices")
            return self[key[:at]]._indirect(key[at:])
        if self._index is None and self._ap is None and len(key) == len(self.shape) and self._rotate is None:
            view = self._slice_whole(key)        # the common case: t[a:b, c:d] of a whole tensor
            if view is not None:
                return view
        gathered = self._index is not None and any(isinstance(e, np.ndarray) for e in self._index)
        if self._ap is not None or gathered or self._dynamic is not None:
            if any(isinstance(k, IndexExpr) for k in key) or self._dynamic is not None:
                raise ViewError("indexing a tile made by an access pattern with nl.arange/nl.mgrid, or an indirect "
                                "view, is not supported; index it with ints and slices, or index the original once")
            # t.ap(...)[i, a:b]: the pattern's elements indexed (NumPy basic indexing), a view again
            flat = _views.positions(self)[_expand_ellipsis(key, self.ndim)]
            if self.buffer in ON_CHIP and flat.ndim == 1 and self.ndim > 1 and isinstance(key[0], slice):
                flat = flat[:, None]            # on-chip tiles stay 2-D (see _keep_free_axis)
            return _views.from_positions(self, flat, "indexing")
        owner = self._base()
        base = self._index if self._index is not None else tuple(slice(0, n, 1) for n in owner.shape)
        key = _expand_ellipsis(key, self.ndim)
        view = NkiTensor((), self.dtype, self.buffer, self.name)
        view._owner, view._hw, view._launch = owner, self._hw, self._launch
        if any(isinstance(k, IndexExpr) for k in key):
            if len(key) != self.ndim:
                raise NKIError(f"an access pattern must index every axis of a {self.ndim}-d tensor "
                               f"(got {len(key)} indices)")
            ap, shape, keys = [], [], iter(key)
            rotate = owner._rotate
            logical, physical = [], []
            for axis, entry in enumerate(base):
                if isinstance(entry, slice):
                    k = next(keys)
                    if isinstance(k, slice):
                        raise NKIError("mixing ':' slices with nl.arange/nl.mgrid indices in one access is not "
                                       "supported; use an iterator for every axis")
                    if rotate is not None and axis < len(rotate):
                        if not isinstance(k, (int, np.integer)):
                            raise NKIError(f"an iterator on block axis {axis} of {self.name!r}, a direct "
                                           f"allocation whose logical tiles rotate over fewer physical ones, "
                                           f"is not supported: index its blocks with integers")
                        logical.append(int(k))
                        k = int(k) % rotate[axis]   # logical block k lives in physical tile k mod n
                        physical.append(k)
                    ap.append((k, entry.start, entry.step, _slice_len(entry)))
                else:
                    ap.append((entry, 0, 1, None))
            view._ap = tuple(ap)
            if logical:
                view._block = (tuple(physical), tuple(logical))
            view.shape = indexing.tile_shape(key, indexing.expr_iterators(key))
            first = key[0]
            if self._valid is not None and isinstance(first, IndexExpr) and first.const == 0 \
                    and len(first.terms) == 1 and first.terms[0][1] == 1 and first.terms[0][0].axis == 0:
                # t[i_p, i_f] of a masked result: the same rows are valid, now named by i_p
                view._valid = self._valid
                view._valid_iterator = first.terms[0][0]
            return view
        index, shape, keys = [], [], iter(key)
        rotate = owner._rotate
        logical, physical = [], []
        for axis, entry in enumerate(base):
            if not isinstance(entry, slice):
                index.append(entry)
                continue
            extent = _slice_len(entry)
            k = next(keys, slice(None))
            if isinstance(k, (int, np.integer)):
                k = int(k)
                if k < -extent or k >= extent:
                    raise OutOfBoundsError(f"out-of-bounds index {k} on axis {len(shape)} of extent {extent} "
                                           f"({self.name or 'tensor'} {self.shape})", value=k, limit=extent)
                k %= extent
                k = entry.start + k * entry.step
                if rotate is not None and axis < len(rotate):
                    logical.append(k)
                    k %= rotate[axis]       # logical block k lives in physical tile k mod n (mod_alloc)
                    physical.append(k)
                index.append(k)
            elif isinstance(k, slice):
                if rotate is not None and axis < len(rotate) and _slice_len(slice(*k.indices(extent))) > 1:
                    raise NKIError(f"slicing block axis {axis} of {self.name!r}, a direct allocation whose "
                                   f"{extent} logical tiles rotate over {rotate[axis]} physical ones, is not "
                                   f"supported: index its blocks one at a time")
                start, stop, step = k.start, k.stop, k.step or 1
                start = 0 if start is None else int(start)
                stop = extent if stop is None else int(stop)
                if step <= 0:
                    raise NKIError(f"slice step must be positive, got {step}")
                if start < 0 or stop > extent or start > stop:
                    raise OutOfBoundsError(
                        f"out-of-bounds slice [{start}:{stop}] on axis {len(shape)} of extent {extent} "
                        f"({self.name or 'tensor'} {self.shape})", value=(start, stop), limit=extent)
                n = len(range(start, stop, step))
                index.append(slice(entry.start + start * entry.step,
                                   entry.start + start * entry.step + (n - 1) * step * entry.step + 1,
                                   entry.step * step))
                shape.append(n)
            else:
                raise NKIError(f"unsupported index {k!r}: use ints, slices or nl.arange/nl.mgrid expressions")
        if next(keys, None) is not None:
            raise OutOfBoundsError(f"too many indices for a {self.ndim}-d tensor", value=len(key), limit=self.ndim)
        if self.buffer in ON_CHIP and len(shape) == 1 and _keep_free_axis(index, base):
            shape.append(1)
        view._index = tuple(index)
        view.shape = tuple(shape)
        if logical:
            view._block = (tuple(physical), tuple(logical))
        return view

    def _indirect(self, key) -> "NkiTensor":
        """table[ids_tile, i_f]: the rows of an HBM tensor named by an [R, 1] SBUF tile of integer indices
        (NKI's indirect DMA, for nl.load). The other axes are indexed as usual."""
        ids = key[0]
        sub_table = self._index is not None and all(
            isinstance(e, (int, np.integer)) or (isinstance(e, slice) and e.step == 1) for e in self._index)
        if self.buffer not in HBM_KINDS or (self._index is not None and not sub_table) or self._ap is not None:
            raise NKIError("indirect indexing (a tile of indices on axis 0) is supported on whole HBM tensors, "
                           "read with nl.load (an indirect DMA)")
        if ids.buffer not in ON_CHIP or ids.buffer == "psum":
            raise NKIError(f"indirect DMA: the indices must be in SBUF (nl.load them first), got {ids.buffer}")
        rows = ids.shape[0] if ids.shape else 1
        if math.prod(ids.shape) != rows:
            raise ShapeMismatchError(f"shape mismatch: indirect DMA indices {ids.shape} must be [R, 1] "
                                     f"(one row index per partition)", value=ids.shape, limit=(rows, 1))
        rest = key[1:]
        if any(isinstance(k, NkiTensor) for k in rest):
            raise NKIError("indirect DMA: only axis 0 may be indexed by a tile of indices")
        # every row of axis 0 for now; the DMA picks `rows` of them at run time
        exprs = [k for k in rest if isinstance(k, IndexExpr)]
        if exprs:
            ndim = max(it.ndim for it in indexing.expr_iterators(tuple(exprs)))
            all_rows = IndexExpr(0, ((indexing.Iterator(self.shape[0], 0, max(ndim, 2)), 1),))
        else:
            all_rows = slice(None)
        view = self[(all_rows,) + tuple(rest)]
        gathered = NkiTensor((rows,) + tuple(view.shape[1:]), self.dtype, self.buffer, self.name)
        gathered._owner, gathered._hw, gathered._launch = view._owner, view._hw, view._launch
        gathered._index, gathered._ap, gathered._gather = view._index, view._ap, ids
        return gathered

    def _slice_whole(self, key):
        """Fast path of __getitem__: only slices, on a whole tensor (None if the key is anything else)."""
        cache = self._views
        if cache is not None:
            try:
                cache_key = tuple((k.start, k.stop, k.step) for k in key)
                view = cache.get(cache_key)
                if view is not None:
                    return view
            except AttributeError:               # not all slices
                return None
        index, shape = [], []
        for k, extent in zip(key, self.shape):
            if type(k) is not slice:
                return None
            start = 0 if k.start is None else int(k.start)
            stop = extent if k.stop is None else int(k.stop)
            step = 1 if k.step is None else int(k.step)
            if step <= 0 or start < 0 or stop > extent or start > stop:
                return None                      # let the general path report it
            n = (stop - start + step - 1) // step
            index.append(slice(start, start + (n - 1) * step + 1 if n else start, step))
            shape.append(n)
        view = NkiTensor(shape, self.dtype, self.buffer, self.name)
        view._owner, view._hw, view._launch, view._index = self._base(), self._hw, self._launch, tuple(index)
        if cache is not None:
            cache[cache_key] = view
        return view

    def __setitem__(self, key, value) -> None:
        dst = self[key]
        _assign(dst, value)

    # -- the hardware view an instruction uses --------------------------------------------
    def hw_view(self, ranges: dict | None = None):
        """The hardware View of this tile, shrunk to `ranges` (iterator -> (lo, hi)) from a mask."""
        if self._invalid is not None:
            raise self._invalid
        if self._emit is not None:
            self._ready()
        if self._dynamic is not None:
            raise ViewError(getattr(self._dynamic, "refusal", None) or   # .indirect(): tensor_indirection.py
                            f"{self.name!r} is an indirect view (scalar_offset / vector_offset, select or "
                            f"vector_select by a tile): only DMAs move it (nisa.dma_copy, nl.load, nl.store), and "
                            f"at a register / NkiScalar scalar_offset any tile operand of {', '.join(_ACCEPTS)} "
                            f"too; trnlab simulates no other instruction with it (AWS's pages show run-time offsets "
                            f"on dma_copy, dma_transpose and tensor_copy)")
        if self._bitcast is not None:
            raise ViewError(_views.BYTES_VIEW_RULE.format(name=self.name, dtype=_dtypes.name(self.dtype),
                                                          own=_dtypes.name(self._bitcast.dtype)))
        if self._ap is not None:
            return self._hw[_resolve_ap(self._ap, ranges, self.name)]
        if not ranges:
            cached = self._view_cache
            if cached is None:
                cached = self._hw[self._index] if self._index is not None else self._hw.full
                self._view_cache = cached
            return cached
        # a mask on a plain tile shrinks the tile axes its iterators are placed on
        index = list(self._index if self._index is not None else (slice(0, n, 1) for n in self._base().shape))
        free_axes = [i for i, e in enumerate(index) if isinstance(e, slice)]
        for it, (lo, hi) in ranges.items():
            if it.axis < len(free_axes):
                a = free_axes[it.axis]
                s = index[a]
                index[a] = slice(s.start + lo * s.step, s.start + (hi - 1) * s.step + 1, s.step) if hi > lo \
                    else slice(s.start, s.start, s.step)
        return self._hw[tuple(index)]

    # -- tensor methods NKI kernels use ---------------------------------------------------
    def reshape(self, shape) -> "NkiTensor":
        """Another shape for a whole HBM tensor (same bytes, row-major), e.g. a [N] vector as [1, N].

        The alias shares the values and which of them are written, so a kernel may store its
        output through a reshaped view and return the original. The scheduler tracks the alias as a
        tensor of its own: a read of the original waits for writes through the alias only at the
        kernel's end.
        """
        shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if -1 in shape:                            # one size inferred, as NumPy does
            shape = _views.infer(shape, math.prod(self.shape), f"reshape({shape})")
        if (self.buffer not in HBM_KINDS and self._index is None and self._ap is None and shape
                and shape[0] == self.shape[0] and math.prod(shape) == math.prod(self.shape)):
            # an on-chip tile's free axes regrouped (same partitions, same bytes per partition):
            # an access pattern over the tile, e.g. (P, F, 4) read as (P, 4F) (AWS's mxfp tutorial)
            pattern, stride = [], 1
            for n in reversed(shape[1:]):
                pattern.append([stride, n])
                stride *= n
            return self.ap([[stride, shape[0]]] + pattern[::-1])
        if self.buffer not in HBM_KINDS or self._index is not None or self._ap is not None:
            return _views.reshape(self, shape)   # a view of a view: its elements in order, another shape
        if math.prod(shape) != math.prod(self.shape):
            raise ShapeMismatchError(f"shape mismatch: cannot reshape {self.shape} to {shape}",
                                     value=shape, limit=self.shape)
        hw = self._hw
        alias = hw.memory.alias(hw, shape)
        return NkiTensor.allocation(alias, self.buffer, self._launch)

    def ap(self, pattern, *pairs, offset: int = 0, scalar_offset=None, vector_offset=None, indirect_dim: int = 0,
           dtype=None) -> "NkiTensor":
        """An access pattern in NKI's [[stride, count], ...] form over this tensor's row-major elements
        (the first pair walks partitions): e.g. pool windows as trailing axes of a [C, H, W] tile
        (NKI Access Patterns page: ``ap(pattern, offset, scalar_offset, vector_offset, indirect_dim,
        dtype)``; the pairs may also be given one per argument, ``t.ap([32, 16], [1, 32])``).
        ``dtype=`` reads the elements as another type (uint32 words, or uint8 bytes, as 4-packed MX
        data: AWS's mxfp-matmul tutorial): the bits move unchanged (`hardware.dtypes.cast`). A type
        of another size re-reads a whole HBM tensor's bytes, its last axis scaled by the size ratio,
        and the pattern counts elements of the new type; on an SBUF tile the same reading is a view of
        the tile's bytes that a DMA moves (`tensor_views.bytes_view`).
        ``scalar_offset=`` (an SBUF tile holding one integer, or an int) moves the whole access by that
        many elements of dim ``indirect_dim``; ``vector_offset=`` (an SBUF tile with one integer per row)
        starts row r of the access (the first pair) at offsets[r] along ``indirect_dim`` instead: an
        indirect view, read at run time by the DMA that moves it."""
        if pairs and isinstance(pairs[0], (list, tuple)):
            pattern, pairs = [pattern] + [p for p in pairs if isinstance(p, (list, tuple))], ()
        if pairs:                                  # the page's positional order after pattern
            named = ("offset", "scalar_offset", "vector_offset", "indirect_dim", "dtype")
            given = dict(zip(named, pairs))
            offset = given.get("offset", offset)
            scalar_offset = given.get("scalar_offset", scalar_offset)
            vector_offset = given.get("vector_offset", vector_offset)
            indirect_dim = given.get("indirect_dim", indirect_dim)
            dtype = given.get("dtype", dtype)
        self._ready()
        if self._bytes_of is not None:             # a .view(dtype) tile: the pattern counts its own elements
            return _views.retyped_ap(self, pattern, offset, dtype, scalar_offset, vector_offset)
        base = 0                                   # where this tensor's elements start in its owner
        if self._index is not None or self._ap is not None or self._dynamic is not None:
            # a view over contiguous storage (a reshape of a whole tile, a block t[i]) is a tensor of its
            # own bytes: its pattern counts from its first element; any other view is "an already indexed
            # tensor" (NKI Access Patterns, "Restriction on Nested Indexing")
            if self._dynamic is not None or not _views.is_contiguous(self) or (
                    dtype is not None and _dtypes.as_dtype(dtype).itemsize != np.dtype(self.dtype).itemsize):
                raise ViewError(".ap() of a tensor that is already indexed or viewed (not contiguous): \"cannot "
                                "specify an access pattern on an already indexed tensor\" (NKI Access Patterns); "
                                "call it on the tensor")
            base = _views.offset(self)
        if scalar_offset is not None and vector_offset is not None:
            raise ViewError(".ap(): at most one of scalar_offset and vector_offset")
        if dtype is not None and _dtypes.as_dtype(dtype).itemsize != np.dtype(self.dtype).itemsize:
            if scalar_offset is not None or vector_offset is not None:
                raise ViewError(".ap(dtype=) of another element size with an indirect offset is not supported")
            if self.buffer in ON_CHIP:           # the tile's bytes as the other type: a DMA moves them
                return _views.bytes_view(self, _dtypes.as_dtype(dtype), pattern, offset)
            return self._retyped(_dtypes.as_dtype(dtype)).ap(pattern, offset=offset)
        pattern = [[int(stride), int(count)] for stride, count in pattern]
        offset = plain(offset)      # a loop index: the positions, hence the index arrays, are affine in it
        dynamic = None
        if scalar_offset is not None or vector_offset is not None:
            if not 0 <= int(indirect_dim) < self.ndim:
                raise ViewError(f".ap(indirect_dim={indirect_dim}) of a {self.ndim}-d tensor {self.shape}")
            stride = math.prod(self.shape[int(indirect_dim) + 1:])    # elements per step of indirect_dim
            if _is_register(scalar_offset) and hasattr(scalar_offset, "usable"):    # an NkiScalar
                scalar_offset.usable("a scalar_offset")
                if scalar_offset.dtype == "int64" and self.buffer in ON_CHIP:
                    raise DtypeError(f"data type: .ap(scalar_offset=) of {self.name!r} in {self.buffer} is an int64 "
                                     f"NkiScalar; \"on an SBUF or PSUM operand the offset must be nl.int32\" "
                                     f"[nki.isa.scalar_load]", value="int64", limit="int32")
            if _is_register(scalar_offset) and scalar_offset.value is None:
                dynamic = (scalar_offset, stride, False)              # read from the register at run time
            elif isinstance(scalar_offset, (int, np.integer)) or hasattr(scalar_offset, "__index__"):
                offset = int(offset) + int(scalar_offset) * stride    # a value known at trace time
            elif scalar_offset is not None:
                dynamic = (_views._offsets(scalar_offset), stride, False)
            else:
                rows = pattern[0][1]
                if (_views._offsets(vector_offset).ndim == 2 and vector_offset.shape[1] > 1
                        and rows == math.prod(vector_offset.shape)):
                    # [128, N] offsets for 128 x N rows: read column by column (nki.isa.dma_transpose's
                    # indirect form: "flat_indices = indices.T.flatten()")
                    vector_offset = _views.from_positions(
                        vector_offset, _views.positions(vector_offset).T.reshape(rows, 1), "offsets", check=False)
                if vector_offset.shape[0] != rows:
                    raise ShapeMismatchError(f"shape mismatch: vector_offset {vector_offset.shape} gives "
                                             f"{vector_offset.shape[0]} offsets for the {rows} rows of the "
                                             f"pattern {pattern}", value=vector_offset.shape, limit=rows)
                pattern[0][0] = 0                  # row r starts at offsets[r] x stride, not r x step
                dynamic = (vector_offset, stride, True)
        view = None
        if _config.fast():
            # from the pattern alone: its bounds, and the index arrays (tensor_views.pattern_index)
            reached = _views.pattern_bounds(pattern, int(offset))
            if reached is None or (reached[0] >= 0 and reached[1] < math.prod(self.shape)):
                view = NkiTensor(tuple(count for _, count in pattern), self.dtype, self.buffer, self.name)
                view._owner, view._hw, view._launch = self._base(), self._hw, self._launch
                view._index = _views.pattern_index(pattern, int(offset) + base, self._hw.shape)
        if view is None:                           # the reference: every element's position
            flat = np.asarray(offset, dtype=np.int64)
            for axis, (stride, count) in enumerate(pattern):
                shape = [1] * len(pattern)
                shape[axis] = count
                flat = flat + stride * np.arange(count, dtype=np.int64).reshape(shape)
            invalid = None
            if flat.size and (flat.min() < 0 or flat.max() >= math.prod(self.shape)):
                # an access pattern is a description until an instruction reads or writes through it (NKI
                # Access Patterns: views "are consumed by NKI ISA instructions"): a kernel may build one for a
                # loop step it then skips (`if h < H: nc_matmul(..., stationary=w.ap(...))`); the first
                # instruction that uses it raises
                invalid = _out_of_bounds(self, int(flat.min()), int(flat.max()))
                flat = np.clip(flat, 0, math.prod(self.shape) - 1)
            view = NkiTensor(flat.shape, self.dtype, self.buffer, self.name)
            view._invalid = invalid
            view._owner, view._hw, view._launch = self._base(), self._hw, self._launch
            # every element's coordinates, kept as the lines they repeat (an instruction holds its views)
            view._index = tuple(_views.repeated_lines(c) for c in unravel(flat + base, self._hw.shape))
        box = _views.as_box(view._index, getattr(self._hw, "partition_axis", None))
        if box is not None:         # a strided box: slices, so DMAs see its contiguous runs
            view._index = box
        view._dynamic = dynamic
        return view

    def _retyped(self, dtype) -> "NkiTensor":
        """This whole HBM tensor's bytes as `dtype` (another element size): [..., L] -> [..., L * old / new]."""
        old, new = np.dtype(self.dtype).itemsize, dtype.itemsize
        last = self.shape[-1] * old
        if self.buffer not in HBM_KINDS or last % new:
            where = self.buffer.upper() if self.buffer not in HBM_KINDS else f"a last axis of {last} bytes"
            raise NKIError(f".ap(dtype={_dtypes.name(dtype)}) of a {_dtypes.name(self.dtype)} tensor in {where}: "
                           f"reading elements as a type of another size needs a whole HBM tensor whose rows hold "
                           f"whole {new}-byte elements")
        hw = self._hw
        alias = hw.memory.alias(hw, tuple(self.shape[:-1]) + (last // new,), name=f"{hw.name}.as_{_dtypes.name(dtype)}",
                                dtype=dtype)
        return NkiTensor.allocation(alias, self.buffer, self._launch)

    # -- NKI 0.7 views (tensor_views.py): the same bytes, another access pattern --------------------
    def slice(self, dim: int, start: int, end: int, step: int = 1) -> "NkiTensor":
        return _views.slice_(self, dim, start, end, step)

    def select(self, dim: int, index) -> "NkiTensor":
        return _views.select(self, dim, index)

    def vector_select(self, dim: int, vector_offset) -> "NkiTensor":
        return _views.vector_select(self, dim, vector_offset)

    def permute(self, dims) -> "NkiTensor":
        return _views.permute(self, dims)

    def broadcast(self, dim: int, size: int) -> "NkiTensor":
        return _views.broadcast(self, dim, size)

    def reshape_dim(self, dim: int, shape) -> "NkiTensor":
        return _views.reshape_dim(self, dim, shape)

    def flatten_dims(self, start_dim: int, end_dim: int) -> "NkiTensor":
        return _views.flatten_dims(self, start_dim, end_dim)

    def expand_dim(self, dim: int) -> "NkiTensor":
        return _views.expand_dim(self, dim)

    def squeeze_dim(self, dim: int) -> "NkiTensor":
        return _views.squeeze_dim(self, dim)

    def rearrange(self, src, dst=None, sizes=None, **axis_sizes) -> "NkiTensor":
        return _views.rearrange(self, src, dst, sizes, **axis_sizes)

    def get_pattern(self) -> list:
        return _views.get_pattern(self)

    @property
    def offset(self) -> int:
        """The element where the view's access pattern starts in its tensor."""
        return _views.offset(self)

    def is_contiguous(self) -> bool:
        return _views.is_contiguous(self)

    def is_indirect(self) -> bool:
        return self._dynamic is not None or self._gather is not None

    def indirect(self, *args, **kwargs):
        return _views.indirect(self, *args, **kwargs)

    def broadcast_to(self, shape) -> "NkiTensor":
        return _OPERATIONS.language.broadcast_to(self, shape)

    def view(self, dtype) -> "NkiTensor":
        """The same bytes read as `dtype` (NkiTensor.view(dtype), a reinterpreting view: the last axis
        scaled by the size ratio): for a whole HBM tensor, as `.ap(dtype=)` reads it; for an SBUF / PSUM
        tile, a tile of `dtype` over the same bytes of each partition (`tensor_views.retype`)."""
        self._ready()
        if self.buffer in HBM_KINDS and self._index is None and self._ap is None:
            return self._retyped(_dtypes.as_dtype(dtype))
        if self.buffer in ON_CHIP:
            return _views.retype(self, _dtypes.as_dtype(dtype))
        raise ViewError(f"view({dtype}) of {self.name!r} ({self.buffer}, a view): trnlab reinterprets whole "
                        f"HBM tensors and on-chip tiles")

    # AWS's nki.language.NkiTensor page lists `reinterpret_cast` among the attributes; its stub assigns it
    # after `view`, whose docstring reads "Equivalent to numpy.ndarray.view(dtype) or C++ reinterpret_cast":
    # the same method under a second name.
    reinterpret_cast = view

    # -- arithmetic (nl.add etc.) ------------------------------------------------------
    def __add__(self, other): return _OPERATIONS.language.add(self, other)
    def __radd__(self, other): return _OPERATIONS.language.add(other, self)
    def __sub__(self, other): return _OPERATIONS.language.subtract(self, other)
    def __rsub__(self, other): return _OPERATIONS.language.subtract(other, self)
    def __mul__(self, other): return _OPERATIONS.language.multiply(self, other)
    def __rmul__(self, other): return _OPERATIONS.language.multiply(other, self)
    def __truediv__(self, other): return _OPERATIONS.language.divide(self, other)
    def __rtruediv__(self, other): return _OPERATIONS.language.divide(other, self)
    def __neg__(self): return _OPERATIONS.language.negative(self)
    def __pow__(self, other): return _OPERATIONS.language.power(self, other)

    def __iadd__(self, other):
        launch = self._launch
        tracer = getattr(launch, "loop_tracer", None)
        if tracer is not None and tracer.flushed is not None:
            _loops.consumed(tracer, other)
        if isinstance(other, NkiTensor) and other._emit is not None and launch.pending is other \
                and getattr(other._emit, "accumulates", False):
            launch.pending = None
            _check_same_shape(self, other, "+=")
            emit, other._emit = other._emit, None
            emit(self, True)          # matmul accumulates in PSUM, no extra instruction
            other._become(self)
            return self
        _assign(self, _OPERATIONS.language.add(self, other))
        return self

    def __isub__(self, other):
        _assign(self, _OPERATIONS.language.subtract(self, other))
        return self

    def __imul__(self, other):
        _assign(self, _OPERATIONS.language.multiply(self, other))
        return self

    def __itruediv__(self, other):
        _assign(self, _OPERATIONS.language.divide(self, other))
        return self


def _keep_free_axis(index: list, base) -> bool:
    """An SBUF/PSUM tile stays 2-D: `t[:, k]` of a (P, F) tile is (P, 1), not (P,) — the memory is
    partitions x bytes (NKI errors page, err_1d_arange_not_supported: "NKI expects tile indices to
    have at least two dimensions to match the underlying memory (SBUF or PSUM)"). The last integer
    index after the partition axis becomes a one-element slice."""
    first_slice = next(i for i, e in enumerate(index) if isinstance(e, slice))
    for axis in range(len(index) - 1, first_slice, -1):
        if not isinstance(index[axis], slice) and not isinstance(base[axis], int):
            k = int(index[axis])
            index[axis] = slice(k, k + 1, 1)
            return True
    return False


class _Operations:
    """What tiles do that the instruction layers above define: tile math (`t + u` is nl.add), copies
    and fills (`t[...] = u` is a tensor_copy / dma_copy / memset), and allocation rules. The layering
    reads one way, tensor <- isa <- language: this module imports neither; nki.isa and nki.language
    install their functions here when they are imported (`install`)."""

    def __init__(self):
        self.language = None     # trnlab.nki.language: add, subtract, ..., broadcast_to
        self.isa = None          # trnlab.nki.isa: dma_copy, tensor_copy, memset
        self.allocate = None     # language._allocate(shape, dtype, buffer, name, launch)


_OPERATIONS = _Operations()


def install(*, language=None, isa=None, allocate=None) -> None:
    """Give tiles their operations (called by trnlab.nki.isa and trnlab.nki.language on import)."""
    if language is not None:
        _OPERATIONS.language = language
    if isa is not None:
        _OPERATIONS.isa = isa
    if allocate is not None:
        _OPERATIONS.allocate = allocate


def _slice_len(s: slice) -> int:
    return len(range(s.start, s.stop, s.step))


def _expand_ellipsis(key: tuple, ndim: int) -> tuple:
    if not any(k is Ellipsis for k in key):
        return key
    at = next(i for i, k in enumerate(key) if k is Ellipsis)
    fill = ndim - (len(key) - 1)
    return key[:at] + (slice(None),) * max(fill, 0) + key[at + 1:]


def _resolve_ap(ap, ranges, name):
    exprs = tuple(e for e, _, _, extent in ap if extent is not None)
    extents = tuple(extent for _, _, _, extent in ap if extent is not None)
    index, _ = indexing.resolve(exprs, extents, ranges, name or "tensor")
    out, k = [], 0
    arrays = not isinstance(index[0], slice) if index else False
    for entry, start, step, extent in ap:
        if extent is None:
            out.append(np.asarray(entry) if arrays else entry)
            continue
        local = index[k]
        k += 1
        if isinstance(local, slice):
            out.append(slice(start + local.start * step, start + (local.stop - 1) * step + 1, local.step * step)
                       if local.stop > local.start else slice(start, start, step))
        elif isinstance(local, np.ndarray):
            out.append(start + local * step)
        else:
            out.append(start + int(local) * step)
    return tuple(out)


def _check_same_shape(dst: NkiTensor, src: NkiTensor, what: str) -> None:
    """Same shape up to size-1 axes, as AWS's compiler accepts (`t[...] = x` of a (P, 1, F) into (P, F))."""
    squeeze = lambda shape: tuple(n for n in shape if n != 1)  # noqa: E731
    if tuple(dst.shape) != tuple(src.shape) and squeeze(dst.shape) != squeeze(src.shape):
        raise ShapeMismatchError(f"shape mismatch in '{what}': destination {dst.shape} vs value {src.shape}",
                                 value=src.shape, limit=dst.shape)


def _assign(dst: NkiTensor, value) -> None:
    """`dst[...] = value`: issue the pending instruction into dst, or copy / fill."""
    launch = dst._launch
    if isinstance(value, NkiTensor):
        tracer = getattr(launch, "loop_tracer", None)
        if tracer is not None and tracer.flushed is not None:
            _loops.consumed(tracer, value)
        if value._emit is not None:
            if launch.pending is value:
                launch.pending = None
            _check_same_shape(dst, value, "tile assignment")
            emit, value._emit = value._emit, None
            emit(dst, None)
            value._become(dst)
            return
        if value._base() is dst._base() and value._index == dst._index and (
                value._ap is dst._ap or (value._ap is not None and dst._ap is not None
                                         and repr(value._ap) == repr(dst._ap))):
            # `t[i] += x` writes back the region it just updated (also with nl.arange indices, whose
            # access patterns are equal when they print equal: same iterators, extents and steps)
            return
        _check_same_shape(dst, value, "tile assignment")
        isa = _OPERATIONS.isa
        if dst.buffer in HBM_KINDS or value.buffer in HBM_KINDS:
            isa.dma_copy(dst=dst, src=value)
        else:
            isa.tensor_copy(dst=dst, src=value)
        return
    if isinstance(value, (int, float, np.integer, np.floating)):
        _OPERATIONS.isa.memset(dst=dst, value=value)
        return
    raise NKIError(f"cannot assign a {type(value).__name__} to a tile")


def _is_register(value) -> bool:
    """Is `value` an nki.isa.VirtualRegister (a scalar_offset read from a register when the program runs)?"""
    return any(c.__name__ == "VirtualRegister" and c.__module__ == "trnlab.nki.isa_registers"
               for c in type(value).__mro__)      # an NkiScalar (isa_scalars.py) is one too


def _out_of_bounds(t, lowest: int, highest: int) -> OutOfBoundsError:
    """An access pattern reaching outside tensor `t` (elements lowest..highest of its row-major ones)."""
    size = math.prod(t.shape)
    return OutOfBoundsError(f"out-of-bounds access pattern on {t.name or 'tensor'} {t.shape}: "
                            f"elements [{lowest}, {highest}] of {size}", value=(lowest, highest), limit=size)
