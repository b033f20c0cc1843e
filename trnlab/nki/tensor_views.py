"""`NkiTensor`'s views (NKI 0.7): the same bytes read another way, never a copy.

AWS's NkiTensor page (nki.language.NkiTensor): "All view operations (slice, permute, reshape, etc.)
return new NkiTensor objects that share the same underlying storage — no data is copied", and "On-chip
tensors (SBUF, PSUM) have a partition dimension at dim 0 ... Most view operations cannot modify this
dimension". The NKI Access Patterns page: the view primitives "are implemented on top of .ap(): each
view method composes a hardware access pattern". The methods' arguments are those of AWS's NKI Library
`TensorView` (its API page: slice(dim, start, end, step), select(dim, index), permute(dims),
broadcast(dim, size), reshape_dim(dim, shape), flatten_dims(start_dim, end_dim), expand_dim(dim),
squeeze_dim(dim), rearrange(src, dst, sizes), vector_select(dim, offsets)).

Here a view is its elements' flat positions in the owner tensor (`positions`: an int array of the view's
shape); a method rearranges that array with NumPy and `from_positions` makes it a view again — slices where
it is a strided box, index arrays otherwise — after checking it is an access pattern
(offset + sum of index x stride per axis, `pattern_of`). An instruction reading it reads the owner's
elements in the view's order and is costed as that access (hardware/cost.py). A select or vector_select
by a tile of indices gives an *indirect* view (`NkiTensor._dynamic`), which DMAs move (`dma_copy`).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from trnlab import config as _config
from trnlab.hardware import dtypes as _dtypes
from trnlab.hardware.tensor import unravel
from trnlab.nki.errors import NKIError, ViewError

ON_CHIP = ("sbuf", "psum")


def as_box(index: tuple, partition_axis: int | None = None):
    """Basic indexing equal to the integer index arrays of an access pattern, if it is a strided box
    (tensor axis d walks pattern axis d only, by a constant positive step: a slice), else None. A
    tensor of more axes than the pattern (a 2-d pattern over an HBM tensor [1, d, S]) is a box too
    when each extra axis stays at one position over the whole pattern: an int there, the other axes
    walking the pattern's axes in order. `partition_axis` (an on-chip tile's) never becomes an int."""
    if not index:
        return None
    rank = index[0].ndim
    if any(a.ndim != rank for a in index) or len(index) < rank:
        return None
    extra = len(index) - rank                   # tensor axes the pattern does not walk
    box, d = [], 0
    for axis, a in enumerate(index):
        flat = a.reshape(-1)
        if extra and axis != partition_axis and (flat.size == 0 or (flat == flat[0]).all()):
            box.append(int(flat[0]) if flat.size else 0)
            extra -= 1
            continue
        if d >= rank:
            return None
        line = a[tuple(slice(None) if k == d else 0 for k in range(a.ndim))]
        if not np.array_equal(a, np.broadcast_to(line.reshape([-1 if k == d else 1 for k in range(a.ndim)]), a.shape)):
            return None
        step = int(line[1] - line[0]) if line.size > 1 else 1
        if step <= 0 or (line.size > 1 and not np.array_equal(np.diff(line), np.full(line.size - 1, step))):
            return None
        box.append(slice(int(line[0]), int(line[-1]) + 1, step))
        d += 1
    return tuple(box) if d == rank and extra == 0 else None


def pattern_bounds(pattern, offset: int):
    """(lowest, highest) flat position an access pattern [[stride, count], ...] from `offset` reaches,
    from the pattern alone; None if it reaches none (a count of 0)."""
    lo = hi = int(offset)
    for stride, count in pattern:
        if count <= 0:
            return None
        reach = stride * (count - 1)
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return lo, hi


def pattern_index(pattern, start: int, shape: tuple) -> tuple:
    """``unravel(start + sum_k i_k x stride_k, shape)`` for an access pattern
    [[stride, count], ...] (start and every position inside `shape`), built from the pattern: the
    same int arrays, element for element.

    The fast path (`config.fast()`) of `NkiTensor.ap`: NumPy's unravel divides every element by
    every axis's row size. When the start and each stride split into per-axis coordinates that
    never carry into the next axis over the whole pattern (the usual case: a pattern that walks
    rows, columns and tiles of the tensor), coordinate d is start_d + sum_k i_k x stride_k,d,
    a few broadcast adds; otherwise NumPy's unravel (the reference)."""
    counts = tuple(count for _, count in pattern)
    split = _split(start, shape) if counts and min(counts) > 0 else None
    parts = [_split(stride, shape) if stride >= 0 else None for stride, _ in pattern]
    if split is not None and all(p is not None for p in parts):
        reach = [split[d] + sum(p[d] * (count - 1) for p, count in zip(parts, counts))
                 for d in range(len(shape))]
        if all(r < n for r, n in zip(reach, shape)):
            # each coordinate array is a broadcast (read-only) view of the sum of its lines: the
            # pattern's size in memory, not its elements' (an index array is only ever read)
            coordinates = []
            for d in range(len(shape)):
                coordinate = np.full([1] * len(counts), split[d], dtype=np.intp)
                for k, p in enumerate(parts):
                    if p[d]:
                        line = [1] * len(counts)
                        line[k] = counts[k]
                        coordinate = coordinate + p[d] * np.arange(counts[k], dtype=np.intp).reshape(line)
                coordinates.append(np.broadcast_to(coordinate, counts))
            return tuple(coordinates)
    flat = np.asarray(start, dtype=np.int64)
    for axis, (stride, count) in enumerate(pattern):
        line = [1] * len(pattern)
        line[axis] = count
        flat = flat + stride * np.arange(count, dtype=np.int64).reshape(line)
    return unravel(flat, shape)   # NumPy 2.4's unravel_index is wrong past 8192 positions ending in [.., 1]


def repeated_lines(coordinate: np.ndarray) -> np.ndarray:
    """`coordinate` (an index array, only ever read) as a read-only broadcast of its lines: each axis
    along which it repeats itself is kept once. The same values element for element; the memory of
    the lines, not of every element (an access pattern's coordinate varies along few of its axes)."""
    lines = coordinate
    for axis in range(coordinate.ndim):
        first = lines.take([0], axis=axis)
        if lines.shape[axis] > 1 and np.array_equal(lines, np.broadcast_to(first, lines.shape)):
            lines = first
    return lines if lines is coordinate else np.broadcast_to(lines, coordinate.shape)


def _split(position: int, shape: tuple):
    """Row-major coordinates of flat `position` in `shape` (each inside its axis), or None."""
    if position < 0 or position >= math.prod(shape):
        return None
    coordinates = []
    for n in reversed(shape):
        position, c = divmod(position, n)
        coordinates.append(c)
    return coordinates[::-1]


def positions(t) -> np.ndarray:
    """The flat (row-major) element positions in its owner tensor of each element of view `t` (of a
    `.view(dtype)` tile: in its own type's elements over the retyped tile's bytes)."""
    t._ready()
    if t._bytes_of is not None:
        return t._bytes_of[1]
    if t._dynamic is not None or t._gather is not None:
        raise ViewError(f"a view of an indirect access ({t.name!r}: a select / vector_select / .ap by a tile "
                        f"of offsets) is moved by a DMA as it is; take the view before the indirect select")
    flat = t.hw_view().flat_positions()
    if flat.size != math.prod(t.shape):
        raise ViewError(f"a view of {t.name!r} {t.shape}: its access reads {flat.size} elements")
    return flat.reshape(t.shape)


def pattern_of(flat: np.ndarray):
    """(offset, [[stride, count], ...]) if `flat` is an access pattern (offset + sum of i_k x stride_k),
    else None."""
    if flat.size == 0:
        return None
    offset = int(flat.flat[0])
    pattern, expected = [], np.full(flat.shape, offset, dtype=np.int64)
    for axis, n in enumerate(flat.shape):
        step = int(flat[tuple(1 if k == axis else 0 for k in range(flat.ndim))]) - offset if n > 1 else 0
        pattern.append([step, n])
        expected = expected + step * np.arange(n, dtype=np.int64).reshape([-1 if k == axis else 1
                                                                            for k in range(flat.ndim)])
    return (offset, pattern) if np.array_equal(expected, flat) else None


def from_positions(t, flat: np.ndarray, what: str, dynamic=None, check: bool = True):
    """A view of `t`'s owner whose elements are at `flat` (int array of the view's shape)."""
    if t._bytes_of is not None:
        return _retyped_view(t._bytes_of[0], t.dtype, flat, what)
    if check and flat.size and pattern_of(flat) is None:
        raise ViewError(f"{what} of {t.name!r} {t.shape} is not an access pattern over its bytes (no single "
                        f"stride per axis): copy it first")
    hw = t._hw
    view = type(t)(flat.shape, t.dtype, t.buffer, t.name)
    view._owner, view._hw, view._launch = t._base(), hw, t._launch
    index = unravel(flat, hw.shape) if flat.ndim else tuple(np.asarray(i) for i in unravel(flat, hw.shape))
    box = as_box(index, getattr(hw, "partition_axis", None))
    view._index = box if box is not None else index
    view._dynamic = dynamic
    return view


def _dim(t, dim: int, what: str) -> int:
    if not -t.ndim <= dim < t.ndim:
        raise ViewError(f"{what}: dim {dim} of a {t.ndim}-d tensor {t.shape}")
    return dim % t.ndim


def _partition_dim(t) -> int:
    """Which dim of `t` is the partition dim: the tensor's own for a whole block tensor
    ``(B, par_dim(P), F)``, else 0 (views of on-chip tensors keep the partitions first)."""
    whole = t._index is None and t._ap is None
    return (getattr(t._hw, "partition_axis", 0) or 0) if whole else 0


def _keep_partitions(t, dim: int, what: str) -> None:
    if t.buffer in ON_CHIP and dim == _partition_dim(t):
        raise ViewError(f"{what} on dim 0 of {t.buffer.upper()} tensor {t.name!r} {t.shape}: dim 0 is the partition "
                        f"dimension, which views of on-chip tensors keep (nki.language.NkiTensor)")


def slice_(t, dim: int, start: int, end: int, step: int = 1):
    """Elements start, start + step, ... < end of `dim` (end clamped to the axis)."""
    dim = _dim(t, dim, "slice")
    end = min(int(end), t.shape[dim])
    if start < 0 or end <= start or step <= 0:
        raise ViewError(f"slice(dim={dim}, start={start}, end={end}, step={step}) of {t.shape}: need "
                        f"0 <= start < end and step > 0")
    key = tuple(slice(start, end, step) if k == dim else slice(None) for k in range(t.ndim))
    return from_positions(t, positions(t)[key], "slice")


def select(t, dim: int, index):
    """Dim `dim` fixed at `index` (and removed): an int, or a [1, 1] SBUF tile of an integer read at run
    time (an indirect view: AWS's TensorView select with a tile, .ap(scalar_offset=, indirect_dim=))."""
    dim = _dim(t, dim, "select")
    _keep_partitions(t, dim, "select")
    flat = positions(t)
    if isinstance(index, (int, np.integer)):
        if not -t.shape[dim] <= index < t.shape[dim]:
            raise ViewError(f"select(dim={dim}, index={index}) of {t.shape}: out of range")
        return from_positions(t, np.take(flat, int(index), axis=dim), "select")
    stride = _stride(flat, dim, t, "select")
    return from_positions(t, np.take(flat, 0, axis=dim), "select", dynamic=(_offsets(index), stride, False))


def vector_select(t, dim: int, offsets):
    """Row r of dim 0 taken at offsets[r] (an SBUF tile with one integer per partition, read at run time):
    an indirect view with offsets.shape[0] rows (AWS's TensorView vector_select: dim 0 only)."""
    dim = _dim(t, dim, "vector_select")
    if dim != 0:
        raise ViewError(f"vector_select(dim={dim}): only dim 0 (each row its own offset)")
    flat = positions(t)
    stride = _stride(flat, 0, t, "vector_select")
    rows = offsets.shape[0]
    base = np.broadcast_to(flat[0:1], (rows,) + flat.shape[1:])
    return from_positions(t, np.ascontiguousarray(base), "vector_select", dynamic=(_offsets(offsets), stride, True),
                          check=False)


def _stride(flat, dim, t, what) -> int:
    pattern = pattern_of(flat)
    stride = pattern[1][dim][0] if pattern is not None and t.shape[dim] > 1 else 0
    if stride == 0:
        hw_shape = t._hw.shape
        stride = math.prod(hw_shape[1:]) if t.shape[dim] <= 1 else 0
    if stride <= 0:
        raise ViewError(f"{what} on dim {dim} of {t.name!r} {t.shape}: the dim has no positive stride")
    return stride


def _offsets(tile):
    from trnlab.nki.tensor import NkiTensor      # (the tile class: imported late, tensor.py imports this module)
    if not isinstance(tile, NkiTensor) or tile.buffer != "sbuf":
        raise ViewError(f"an indirect offset must be an SBUF tile of integers, got "
                        f"{getattr(tile, 'buffer', type(tile).__name__)}")
    return tile


def permute(t, dims):
    """The axes in the order `dims` (dim 0 stays first on chip)."""
    dims = tuple(int(d) for d in dims)
    if sorted(dims) != list(range(t.ndim)):
        raise ViewError(f"permute({dims}) of a {t.ndim}-d tensor: not a permutation of 0..{t.ndim - 1}")
    pdim = _partition_dim(t)
    if t.buffer in ON_CHIP and dims[pdim] != pdim:
        _keep_partitions(t, pdim, f"permute({dims})")
    return from_positions(t, np.transpose(positions(t), dims), "permute")


def broadcast(t, dim: int, size: int):
    """A size-1 `dim` repeated `size` times (stride 0)."""
    dim = _dim(t, dim, "broadcast")
    if t.shape[dim] != 1:
        raise ViewError(f"broadcast(dim={dim}, size={size}) of {t.shape}: only a size-1 dim broadcasts")
    _keep_partitions(t, dim, "broadcast")
    shape = t.shape[:dim] + (int(size),) + t.shape[dim + 1:]
    return from_positions(t, np.ascontiguousarray(np.broadcast_to(positions(t), shape)), "broadcast")


def reshape_dim(t, dim: int, shape):
    """`dim` split into `shape` (one -1 allowed)."""
    dim = _dim(t, dim, "reshape_dim")
    shape = infer(tuple(int(n) for n in shape), t.shape[dim], f"reshape_dim({dim}, {shape})")
    if len(shape) != 1:
        _keep_partitions(t, dim, "reshape_dim")
    return from_positions(t, positions(t).reshape(t.shape[:dim] + shape + t.shape[dim + 1:]), "reshape_dim")


def flatten_dims(t, start_dim: int, end_dim: int):
    """Dims start_dim .. end_dim (inclusive) merged into one (they must be contiguous in memory)."""
    start_dim, end_dim = _dim(t, start_dim, "flatten_dims"), _dim(t, end_dim, "flatten_dims")
    if start_dim >= end_dim:
        raise ViewError(f"flatten_dims({start_dim}, {end_dim}): start_dim must be less than end_dim")
    _keep_partitions(t, start_dim, "flatten_dims")
    shape = t.shape[:start_dim] + (math.prod(t.shape[start_dim:end_dim + 1]),) + t.shape[end_dim + 1:]
    return from_positions(t, positions(t).reshape(shape), f"flatten_dims({start_dim}, {end_dim})")


def expand_dim(t, dim: int):
    """A new size-1 dim at position `dim`."""
    if not 0 <= dim <= t.ndim:
        raise ViewError(f"expand_dim({dim}) of a {t.ndim}-d tensor")
    _keep_partitions(t, dim, "expand_dim")
    return from_positions(t, np.expand_dims(positions(t), dim), "expand_dim")


def squeeze_dim(t, dim: int):
    """A size-1 `dim` removed."""
    dim = _dim(t, dim, "squeeze_dim")
    if t.shape[dim] != 1:
        raise ViewError(f"squeeze_dim({dim}) of {t.shape}: only a size-1 dim is removed")
    _keep_partitions(t, dim, "squeeze_dim")
    return from_positions(t, np.squeeze(positions(t), axis=dim), "squeeze_dim")


def reshape(t, shape):
    """A view's elements, in order, in another shape (on chip: the same partitions)."""
    shape = infer(tuple(int(n) for n in shape), math.prod(t.shape), f"reshape({shape})")
    if t.buffer in ON_CHIP and _partition_dim(t) == 0 and shape[0] != t.shape[0]:
        raise ViewError(f"reshape of {t.buffer.upper()} tensor {t.name!r} {t.shape} to {shape}: dim 0 is the "
                        f"partition dimension and keeps its size")
    return from_positions(t, positions(t).reshape(shape), f"reshape to {shape}")


def rearrange(t, src, dst=None, sizes=None, **axis_sizes):
    """einops-style: ``t.rearrange(('b', ('h', 'w'), 'c'), ('b', 'c', 'h', 'w'), {'h': 32})`` (AWS's
    TensorView), or ``t.rearrange("b (h w) c -> b c h w", h=32)``: groups on the left split a dim, the
    names reorder, groups on the right merge dims."""
    sizes = dict(sizes or {}, **axis_sizes)
    if dst is None:
        if not isinstance(src, str) or "->" not in src:
            raise ViewError("rearrange: give (src, dst) patterns or one 'src -> dst' string")
        left, right = src.split("->")
        src, dst = _parse(left), _parse(right)
    src, dst = tuple(src), tuple(dst)
    if len(src) != t.ndim:
        raise ViewError(f"rearrange: pattern {src} names {len(src)} dims of a {t.ndim}-d tensor {t.shape}")
    names, shape = [], []
    for entry, n in zip(src, t.shape):
        group = (entry,) if isinstance(entry, str) else tuple(entry)
        known = [sizes.get(g) for g in group]
        if known.count(None) > 1:
            raise ViewError(f"rearrange: group {group} of size {n} needs the sizes of all but one of its names")
        split = infer(tuple(-1 if k is None else int(k) for k in known), n, f"rearrange group {group}")
        names.extend(group)
        shape.extend(split)
    flat_dst = [name for entry in dst for name in ((entry,) if isinstance(entry, str) else entry)]
    if sorted(flat_dst) != sorted(names):
        raise ViewError(f"rearrange: {src} -> {dst} must use the same names on both sides")
    flat = np.transpose(positions(t).reshape(shape), [names.index(n) for n in flat_dst])
    out_shape = []
    at = 0
    for entry in dst:
        k = 1 if isinstance(entry, str) else len(entry)
        out_shape.append(math.prod(flat.shape[at:at + k]))
        at += k
    if t.buffer in ON_CHIP and (flat_dst[0] != names[0] or out_shape[0] != t.shape[0]):
        _keep_partitions(t, 0, f"rearrange {src} -> {dst}")
    return from_positions(t, flat.reshape(out_shape), f"rearrange {src} -> {dst}")


def _parse(side: str) -> tuple:
    out, group = [], None
    for token in side.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            group = []
        elif token == ")":
            out.append(tuple(group))
            group = None
        elif group is not None:
            group.append(token)
        else:
            out.append(token)
    return tuple(out)


def infer(shape: tuple, total: int, what: str) -> tuple:
    if shape.count(-1) > 1:
        raise ViewError(f"{what}: at most one -1")
    known = math.prod(n for n in shape if n != -1)
    if -1 in shape:
        if known <= 0 or total % known:
            raise ViewError(f"{what}: {total} elements do not split into {shape}")
        shape = tuple(total // known if n == -1 else n for n in shape)
    if math.prod(shape) != total:
        raise ViewError(f"{what}: {shape} holds {math.prod(shape)} elements, the dim has {total}")
    return shape


def _box_pattern(t):
    """(offset, pattern) of a whole tensor or a view by ints and slices, read off its index without
    listing its elements (a view of a large HBM tensor); None for other views."""
    if t._ap is not None or t._dynamic is not None or t._gather is not None or t._emit is not None:
        return None
    shape = t._hw.shape
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    index = t._index if t._index is not None else tuple(slice(0, n, 1) for n in shape)
    start, pattern = 0, []
    for entry, stride in zip(index, strides):
        if isinstance(entry, slice):
            r = range(*entry.indices(10 ** 18))
            start += (r.start if len(r) else 0) * stride
            pattern.append([r.step * stride if len(r) > 1 else 0, len(r)])   # (a single step: stride 0)
        elif isinstance(entry, (int, np.integer)):
            start += int(entry) * stride
        else:
            return None
    if len(pattern) != t.ndim or [n for _, n in pattern] != list(t.shape):
        return None
    return start, pattern


def _pattern(t):
    if t._bytes_of is not None:
        return pattern_of(positions(t))
    found = _box_pattern(t)
    if found is not None:
        return found
    if _config.fast() and _fixed_index_view(t):
        return _remembered_pattern(t)
    return pattern_of(positions(t))


# fast path (`config.fast()`): a view's pattern, by the view: id(view) -> (weak reference to it, pattern)
_PATTERNS: dict = {}
_PATTERNS_KEPT = 1024


def _fixed_index_view(t) -> bool:
    """A view by index arrays (a reshape of a tile, a permuted or rearranged view): its index is set
    when the view is made and never changes, so neither does its pattern."""
    return (t._index is not None and t._ap is None and t._dynamic is None and t._gather is None
            and t._emit is None and t._bytes_of is None)


def _remembered_pattern(t):
    """`pattern_of(positions(t))`, listed once per view. The fast path of `.ap()` on a view (it asks
    for the view's pattern twice: is it contiguous, where does it start): the NKI Library's
    router_topk takes ``.ap()`` of one reshaped x tile [128, 640, 64] once per (token tile, hidden
    tile), and listing its 5.2 M positions each time cost 60 CPU s of its 61 at T = 640, H = 8192.
    The reference lists them at every call; the pattern is the same (tests/test_tensor_views.py)."""
    seen = _PATTERNS.get(id(t))
    if seen is None or seen[0]() is not t:      # not the same view (or a new one at a freed one's id)
        if len(_PATTERNS) >= _PATTERNS_KEPT:
            _PATTERNS.clear()
        seen = _PATTERNS[id(t)] = (weakref.ref(t), pattern_of(positions(t)))
    found = seen[1]
    # a copy: get_pattern hands the list to the kernel
    return None if found is None else (found[0], [list(pair) for pair in found[1]])


def get_pattern(t) -> list:
    """The view's access pattern [[stride, count], ...] over its owner's elements (`t.offset` the start)."""
    found = _pattern(t)
    if found is None:
        raise ViewError(f"{t.name!r} {t.shape} is not an access pattern")
    return found[1]


def offset(t) -> int:
    found = _pattern(t)
    return 0 if found is None else found[0]


def is_contiguous(t) -> bool:
    """Does the view cover its elements in storage order without gaps?"""
    found = _pattern(t)
    if found is None:
        return False
    pairs = [(stride, n) for stride, n in found[1] if n != 1]
    expected = 1
    for stride, n in reversed(pairs):
        if stride != expected:
            return False
        expected *= n
    return True


def indirect(t, *args, **kwargs):
    """Tensor Indirection (NeuronCore-v4): `tensor_indirection.indirect`."""
    from trnlab.nki import tensor_indirection    # (it imports the tile class, which imports this module)
    return tensor_indirection.indirect(t, *args, **kwargs)


BYTES_VIEW_RULE = ("{name!r} reads an on-chip tile's {own} elements as {dtype} (.view(dtype) / .ap(dtype=) of "
                   "another type): only a DMA moves such a view, or the engine instructions that read one "
                   "(of any element size: nisa.tensor_copy src / dst; of the same element size: "
                   "nisa.tensor_tensor data1 / data2 / dst, "
                   "nisa.tensor_scalar and nisa.activation data / dst, nisa.nc_matmul stationary / moving (and "
                   "dst with is_transpose), nisa.nc_matmul_mx stationary / moving, nisa.quantize_mx dst; "
                   "nisa.quantize_mx src of the same or a wider size); other engines and operands read a tile in "
                   "its own type — copy the bytes with a DMA first")


def bytes_view(t, dtype, pattern, offset: int = 0):
    """An on-chip tile's bytes read as `dtype`, another element size (``sbuf_tile.ap(pattern, dtype=...)``,
    NKI Access Patterns): the pattern counts elements of the new type over the tile's row-major bytes, the
    first pair walking the partitions. The view keeps the whole old elements it covers (`_bitcast`, an
    ordinary access pattern of the tile) and only a DMA moves it, byte for byte (hardware
    `dma_copy_bytes`). A pattern that reads part of an old element is refused by name."""
    old, new = np.dtype(t.dtype).itemsize, np.dtype(dtype).itemsize
    pattern = [[int(stride), int(count)] for stride, count in pattern]
    row_bytes = math.prod(t.shape[1:]) * old
    if row_bytes % new:
        raise ViewError(f".ap(dtype={np.dtype(dtype).name}) of {t.name!r} {t.shape} {np.dtype(t.dtype).name}: a "
                        f"partition's {row_bytes} bytes do not hold whole {new}-byte elements")
    if new < old:                          # r new elements make one old element: whole groups only
        r = old // new
        *outer, (last_stride, last_count) = pattern
        if last_stride != 1 or last_count % r or int(offset) % r or any(s % r for s, _ in outer):
            raise ViewError(f".ap(dtype={np.dtype(dtype).name}) of {t.name!r} ({np.dtype(t.dtype).name}): the "
                            f"pattern {pattern} at offset {offset} reads part of a {old}-byte element; trnlab moves "
                            f"an on-chip tile's bytes as whole {np.dtype(t.dtype).name} elements (runs of {r} "
                            f"{np.dtype(dtype).name} elements starting at a multiple of {r})")
        covered = t.ap([[s // r, c] for s, c in outer] + [[1, last_count // r]], offset=int(offset) // r)
    elif new == old:                       # the same elements, another type (a .view of the same size)
        covered = t.ap(pattern, offset=int(offset))
    else:                                  # one new element spans r old elements
        r = new // old
        covered = t.ap([[s * r, c] for s, c in pattern] + [[1, r]], offset=int(offset) * r)
    view = type(t)(tuple(c for _, c in pattern), dtype, t.buffer, t.name)
    view._owner, view._hw, view._launch = t._base(), t._hw, t._launch
    view._bitcast = covered
    return view



# -- NkiTensor.view(dtype) of an on-chip tile ---------------------------------------------------------------
def retype(t, dtype):
    """An SBUF / PSUM tile's bytes as a tile of `dtype` (``tile.view(dtype)``, nki.language.NkiTensor): each
    partition keeps its bytes, the last axis holds ``last x old itemsize / new itemsize`` elements (NumPy's
    ``.view``). The result is a view of the tile's bytes (`bytes_view`) that indexes, slices, reshapes and
    ``.ap()``s as a tile of its own type; DMAs move it, and the engines that read or write a retyped tile
    (nc_matmul_mx, quantize_mx, tensor_copy; tensor_tensor, tensor_scalar, activation, nc_matmul and
    nc_transpose through `engine_operand`) see its bytes as `dtype`."""
    if np.dtype(dtype) == np.dtype(t.dtype):
        return t
    if t._bytes_of is not None:                # a view of a view: the first tile's bytes, read again
        base, flat = t._bytes_of
        start = int(flat.flat[0]) if flat.size else 0
        if not np.array_equal(flat.reshape(-1), np.arange(start, start + flat.size)):
            raise ViewError(f"view({_dtypes.name(dtype)}) of {t.name!r} {t.shape}: not contiguous (a strided view "
                            f"of a retyped tile); retype the tile, then take the view")
    old, new = np.dtype(t.dtype).itemsize, np.dtype(dtype).itemsize
    if t.ndim < 2:
        raise ViewError(f"view({_dtypes.name(dtype)}) of {t.buffer.upper()} tile {t.name!r} {t.shape}: an "
                        f"on-chip tile keeps its partition dimension, so it needs a free axis to retype")
    last = t.shape[-1] * old
    if last % new:
        raise ViewError(f"view({_dtypes.name(dtype)}) of {t.name!r} {t.shape} {_dtypes.name(t.dtype)}: the last "
                        f"axis holds {last} bytes, not a whole number of {new}-byte elements (the same bytes per "
                        f"partition, the element count scaled by the size ratio {old}/{new})")
    shape = tuple(t.shape[:-1]) + (last // new,)
    if t._bytes_of is not None:
        base, flat = t._bytes_of
        start = int(flat.flat[0]) if flat.size else 0
        if (start * np.dtype(t.dtype).itemsize) % new:
            raise ViewError(f"view({_dtypes.name(dtype)}) of {t.name!r}: it starts inside a {new}-byte element")
        return _retyped_view(base, dtype, start * old // new + np.arange(math.prod(shape)).reshape(shape), "view")
    if t._bitcast is not None or t._dynamic is not None or (t._index is not None or t._ap is not None) \
            and not is_contiguous(t):
        raise ViewError(f"view({_dtypes.name(dtype)}) of {t.name!r} {t.shape}: not contiguous (an indexed or "
                        f"indirect view); retype the tile, then take the view")
    return _retyped_view(t, dtype, np.arange(math.prod(shape)).reshape(shape), "view")


def engine_operand(name: str, t, ranges: dict | None = None) -> tuple:
    """(hardware view, keywords) of operand `name` of an engine instruction that reads a retyped tile
    (tensor_tensor, tensor_scalar, activation, nc_matmul, nc_transpose: `hardware.retype.typed`): a `.view(dtype)` tile is its own bytes (``_bitcast``, in the tile's elements)
    with ``<name>_dtype=`` the type to read them as; any other tile its view and no keyword."""
    if t._bitcast is None:
        return t.hw_view(ranges), {}
    return t._bitcast.hw_view(ranges), {f"{name}_dtype": _dtypes.name(t.dtype)}


def _retyped_total(t, dtype) -> int:
    """How many `dtype` elements tile `t`'s bytes hold."""
    return math.prod(t.shape) * np.dtype(t.dtype).itemsize // np.dtype(dtype).itemsize


def _retyped_view(base, dtype, flat: np.ndarray, what: str):
    """The elements at `flat` (positions in `dtype` elements over `base`'s row-major bytes) as a view."""
    total = _retyped_total(base, dtype)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= total):
        raise ViewError(f"{what} of {base.name!r} read as {_dtypes.name(dtype)}: element {int(flat.max())} is past "
                        f"the {total} {_dtypes.name(dtype)} elements its bytes hold")
    found = pattern_of(flat)
    if found is None:
        raise ViewError(f"{what} of {base.name!r} read as {_dtypes.name(dtype)} is not an access pattern over its "
                        f"bytes (no single stride per axis): copy it first")
    start, pattern = found                 # (a size-1 axis has stride 0: whole groups of any size)
    view = bytes_view(base, dtype, pattern, start)
    view._bytes_of = (base, flat)
    return view


def retyped_ap(t, pattern, offset, dtype, scalar_offset, vector_offset):
    """``.ap(pattern, offset)`` of a `.view(dtype)` tile: the pattern counts its elements from its first."""
    if scalar_offset is not None or vector_offset is not None or (
            dtype is not None and np.dtype(dtype) != np.dtype(t.dtype)):
        raise ViewError(f".ap() of {t.name!r}, an on-chip tile read as {_dtypes.name(t.dtype)} (.view): "
                        f"scalar_offset / vector_offset / another dtype= are not supported on it; retype the tile "
                        f"to the type wanted and give a plain pattern")
    base, flat = t._bytes_of
    start = int(flat.flat[0]) if flat.size else 0
    if not np.array_equal(flat.reshape(-1), np.arange(start, start + flat.size)):
        raise ViewError(".ap() of a tensor that is already indexed or viewed (not contiguous): \"cannot specify an "
                        "access pattern on an already indexed tensor\" (NKI Access Patterns); call it on the tensor")
    pattern = [[int(stride), int(count)] for stride, count in pattern]
    positions_ = np.full([c for _, c in pattern], start + int(offset), dtype=np.int64)
    for axis, (stride, count) in enumerate(pattern):
        positions_ = positions_ + stride * np.arange(count, dtype=np.int64).reshape(
            [-1 if k == axis else 1 for k in range(len(pattern))])
    return _retyped_view(base, t.dtype, positions_, ".ap()")


# -- t[s]: indexing by a value known only when the program runs ----------------------------------------------
def run_time_index(t, key: tuple, is_register):
    """``t[..., s, ...]`` with `s` an NkiScalar or a register ("A NkiScalar can be used almost anywhere a Python
    int literal is used", nki.isa.NkiScalar): the view `t[..., 0, ...]` moved by s steps of that axis when the
    program runs — ``t.ap(pattern, offset, scalar_offset=s, indirect_dim=axis)``, read by the instructions that
    take such a view (DMAs; on chip the engines that read a register offset). Several run-time indices
    ``t[s1, s2]`` are folded into that one offset as a compiler would (an access pattern has one start):
    ``s1 x (stride1 / stride2) + s2`` on the innermost of their axes, computed by register instructions
    (NkiScalar arithmetic, `_folded`). On a whole tensor; on an SBUF / PSUM tile not on the partition axis
    ("Dynamic on-chip: dim must not be 0 (partition dim)", NkiTensor.select)."""
    key = tuple(key) + (slice(None),) * (t.ndim - len(key))       # trailing axes: all of them
    at = [k for k, entry in enumerate(key) if is_register(entry)]
    if not at or len(key) != t.ndim:
        raise ViewError(f"indexing {t.name!r} {t.shape} by a run-time scalar: give NkiScalar / register indices "
                        f"and an int or slice for every other axis (got {len(key)} indices for {t.ndim} axes)")
    if t._index is not None or t._ap is not None or t._dynamic is not None or t._bitcast is not None \
            or t._bytes_of is not None:
        raise ViewError(f"indexing {t.name!r}, a view, by a run-time scalar: index the tensor itself (the scalar "
                        f"becomes the scalar_offset of an access pattern, which is taken on a whole tensor)")
    if t.buffer in ON_CHIP and _partition_dim(t) in at:
        axis = _partition_dim(t)
        raise ViewError(f"indexing {t.buffer.upper()} tile {t.name!r} {t.shape} by a run-time scalar on axis {axis}, "
                        f"its partition dimension: \"Dynamic on-chip: dim must not be 0 (partition dim)\" "
                        f"(NkiTensor.select); a run-time offset moves an access pattern within each partition — "
                        f"index a free axis, or move the rows with a DMA")
    fixed = t[tuple(0 if k in at else entry for k, entry in enumerate(key))]     # the view at s = 0
    found = pattern_of(positions(fixed))
    if found is None:
        raise ViewError(f"indexing {t.name!r} by a run-time scalar: the rest of the index is not an access pattern")
    start, pattern = found
    pattern = [[stride if count > 1 else 1, count] for stride, count in pattern]
    axis = at[-1]                                  # the innermost: every other axis's step is a multiple of its
    unit = math.prod(t.shape[axis + 1:])
    offset = _folded([key[k] for k in at], [math.prod(t.shape[k + 1:]) // unit for k in at])
    return t.ap(pattern, offset=start, scalar_offset=offset, indirect_dim=axis)


def _folded(indices: list, factors: list):
    """sum(index x factor): the one index itself, or the register that NkiScalar arithmetic computes it into
    (one ``register_op`` per multiply and add; a register that is not an NkiScalar counts as an int32 one)."""
    from trnlab.nki.isa_scalars import NkiScalar    # (it imports the tile class, which imports this module)
    if len(indices) == 1:
        return indices[0]
    total = None
    for index, factor in zip(indices, factors):
        if not isinstance(index, NkiScalar):      # a plain register read as an int32 scalar: the same register
            scalar = NkiScalar(dtype="int32")
            scalar.id, scalar.value, scalar.origin = index.id, index.value, index.origin
            index = scalar
        term = index if factor == 1 else index * factor
        total = term if total is None else total + term
    return total
