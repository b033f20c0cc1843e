"""Index expressions, access patterns and masks: what `nl.arange`, `nl.mgrid` and `mask=` lower to.

In NKI a tile is addressed by affine expressions of *iterators*: `i_p = nl.arange(128)[:, None]` is an
iterator of 128 values placed on tile axis 0, `i_f = nl.arange(512)[None, :]` one of 512 values on axis
1, and `a[k * 128 + i_p, i_f]` is the [128, 512] tile of `a` starting at row 128k. The tile's shape is
the sizes of the iterators it uses, ordered by their axis (so `a[i_f, i_p]` reads `a` transposed).
Outputs of `nl.mgrid` span their whole grid, as NumPy's mgrid does: an access that leaves a grid axis
unused repeats along it (`w[i_one, i_f]` with `i_p, i_f, i_one = nl.mgrid[0:128, 0:n, 0:1]` reads row
0 of `w` onto all 128 partitions).

A mask such as `mask=(k * 128 + i_p < n)` is an affine predicate on iterators; the hardware executes the
instruction on the sub-range of each iterator where the predicate holds. `restrict` turns a mask into
those ranges; `resolve` turns an access pattern into a NumPy index (slices when the pattern is a plain
strided box, integer arrays otherwise) and checks it stays inside the tensor.
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware.errors import OutOfBoundsError as IndexOutOfBoundsError
from trnlab.nki.errors import MaskError
from trnlab.nki.loop_index import LoopIndex, plain


class Iterator:
    """`size` values 0..size-1 placed on tile axis `axis` of an `ndim`-axis index grid."""

    __slots__ = ("size", "axis", "ndim")

    def __init__(self, size: int, axis: int, ndim: int):
        self.size, self.axis, self.ndim = size, axis, ndim

    def __repr__(self) -> str:
        return f"Iterator(size={self.size}, axis={self.axis})"


class IndexExpr:
    """const + sum(coef * iterator): an affine index expression (what `nl.arange` arithmetic builds).

    `grid` lists every iterator of the `nl.mgrid` the expression came from: like NumPy's mgrid, each
    output spans the whole grid, so `w[i_one, i_f]` from `mgrid[0:128, 0:1, 0:n]` reads a [128, n]
    tile (row 0 of w on every partition).
    """

    __slots__ = ("const", "terms", "grid")
    __array_priority__ = 1000  # so `3 * i_p` with a NumPy int on the left still comes here

    def __init__(self, const: int, terms: tuple[tuple[Iterator, int], ...], grid: tuple = ()):
        self.const, self.terms, self.grid = const, terms, grid

    # -- arithmetic (affine only) -------------------------------------------------
    def __add__(self, other):
        if isinstance(other, IndexExpr):
            merged = dict(self.terms)
            for it, coef in other.terms:
                merged[it] = merged.get(it, 0) + coef
            grid = self.grid + tuple(it for it in other.grid if all(it is not g for g in self.grid))
            # an iterator whose coefficients cancel still spans its axis (0 * i_p + i_f is [P, F])
            grid = grid + tuple(i for i, c in merged.items() if not c and all(i is not g for g in grid))
            return IndexExpr(self.const + other.const, tuple((i, c) for i, c in merged.items() if c), grid)
        if isinstance(other, (int, np.integer, LoopIndex)):
            # a loop index (loops.py) is read as its value: the access box is affine in it
            return IndexExpr(self.const + int(plain(other)), self.terms, self.grid)
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return IndexExpr(-self.const, tuple((i, -c) for i, c in self.terms), self.grid)

    def __sub__(self, other):
        if isinstance(other, (IndexExpr, int, np.integer, LoopIndex)):
            return self + (-other)
        return NotImplemented

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if isinstance(other, (int, np.integer)):
            k = int(other)
            # 0 * i_p drops the term but keeps the axis it spans
            grid = self.grid + tuple(i for i, _ in self.terms if not k and all(i is not g for g in self.grid))
            return IndexExpr(self.const * k, tuple((i, c * k) for i, c in self.terms if c * k), grid)
        return NotImplemented

    __rmul__ = __mul__

    # -- comparisons build mask predicates --------------------------------------------
    def _cmp(self, op, other):
        if isinstance(other, (int, np.integer, IndexExpr, LoopIndex)):
            return Predicate(((self, op, plain(other)),))
        return NotImplemented

    def __lt__(self, other): return self._cmp("<", other)
    def __le__(self, other): return self._cmp("<=", other)
    def __gt__(self, other): return self._cmp(">", other)
    def __ge__(self, other): return self._cmp(">=", other)

    # -- placing an arange on an axis: nl.arange(128)[:, None] -------------------------------
    def __getitem__(self, key):
        if len(self.terms) != 1 or not isinstance(key, tuple):
            raise TypeError("only a bare nl.arange(n) can be placed on an axis, e.g. nl.arange(128)[:, None]")
        (it, coef), = self.terms
        full = [k for k, entry in enumerate(key) if isinstance(entry, slice)]
        if len(full) != 1 or any(e is not None for e in key if not isinstance(e, slice)):
            raise TypeError(f"expected one ':' and None elsewhere, got {key}")
        # NumPy's semantics: every nl.arange(n)[:, None] is the same (n, 1) array, so a mask written with
        # a fresh call (as neuronx-cc's dumped kernels write every index) bounds the access's iterator
        return IndexExpr(self.const, ((_grid_iterator(it.size, full[0], len(key)), coef),))

    # -- ranges ----------------------------------------------------------------------
    def bounds(self, ranges: dict | None = None) -> tuple[int, int]:
        """(min, max) of the expression over the iterators' (possibly masked) ranges."""
        low = high = self.const
        for it, coef in self.terms:
            lo, hi = ranges.get(it, (0, it.size)) if ranges else (0, it.size)
            a, b = coef * lo, coef * (hi - 1)
            low += min(a, b)
            high += max(a, b)
        return low, high

    def values(self, iterators: list[Iterator], ranges: dict | None) -> np.ndarray:
        """Integer array over the grid spanned by `iterators` (one grid axis each)."""
        n = len(iterators)
        total = np.asarray(self.const, dtype=np.int64)
        for it, coef in self.terms:
            lo, hi = ranges.get(it, (0, it.size)) if ranges else (0, it.size)
            shape = [1] * n
            shape[iterators.index(it)] = hi - lo
            total = total + coef * np.arange(lo, hi, dtype=np.int64).reshape(shape)
        return total

    def __repr__(self) -> str:
        parts = [f"{c}*it{it.axis}[{it.size}]" for it, c in self.terms]
        return " + ".join(parts + [str(self.const)])


class Predicate:
    """A conjunction of affine comparisons: the value of `mask=`."""

    __slots__ = ("clauses",)

    def __init__(self, clauses):
        self.clauses = clauses

    def __and__(self, other):
        if isinstance(other, (bool, np.bool_)):         # a compile-time condition: (i_f < n) & (k < K)
            return self if other else False
        if not isinstance(other, Predicate):
            return NotImplemented
        return Predicate(self.clauses + other.clauses)

    __rand__ = __and__

    def __bool__(self):
        raise MaskError("a mask predicate has no truth value inside Python control flow; pass it as mask=")


def arange(*args) -> IndexExpr:
    """nl.arange(stop) or nl.arange(start, stop[, step]): a 1-D iterator expression."""
    r = range(*(plain(a) for a in args))
    if len(r) == 0:
        raise ValueError(f"nl.arange{args} is empty")
    return IndexExpr(r.start, ((_grid_iterator(len(r), 0, 1), r.step),))


class Grid(tuple):
    """What nl.mgrid returns: a tuple of iterators (``i_p, i_f = nl.mgrid[...]``) whose fields name
    them as NKI does: ``.p`` the partition axis, then ``.x``, ``.y``, ``.z`` the free axes in order."""

    def _axis(self, k: int, field: str):
        if k >= len(self):
            raise AttributeError(f"nl.mgrid of {len(self)} axes has no field .{field}")
        return self[k]

    p = property(lambda self: self._axis(0, "p"))
    x = property(lambda self: self._axis(1, "x"))
    y = property(lambda self: self._axis(2, "y"))
    z = property(lambda self: self._axis(3, "z"))


class _MGrid:
    """nl.mgrid[0:128, 0:512] -> (i_p, i_f), each an iterator placed on its own axis (a `Grid`).

    NKI's mgrid is NumPy's ("Same as NumPy mgrid", nki.language.mgrid page,
    awsdocs-neuron.readthedocs-hosted.com nki/api/generated/nki.language.mgrid.html): every output is a dense array
    of the grid's shape, so `.p` of one `mgrid[0:128, 0:512]` and `.p` of another are the same array.
    Grids of one shape therefore share their iterators: `a[g1.p, g2.x]` is `a[g1.p, g1.x]`, and a
    mask on `g2.p` bounds `g1.p` (`_ITERATORS`, by size, axis and number of axes). The same holds for
    `nl.arange(n)[:, None]`: each call is the same array, so each gives the same iterator."""

    def __getitem__(self, key):
        single = not isinstance(key, tuple)
        key = (key,) if single else key
        ranges = [range(s.start or 0, s.stop, s.step or 1) for s in key]
        grid = tuple(_grid_iterator(len(r), axis, len(key)) for axis, r in enumerate(ranges))
        out = Grid(IndexExpr(r.start, ((it, r.step),), grid) for r, it in zip(ranges, grid))
        return out[0] if single else out


mgrid = _MGrid()

_ITERATORS: dict[tuple[int, int, int], Iterator] = {}


def _grid_iterator(size: int, axis: int, ndim: int) -> Iterator:
    """The one iterator of every `nl.mgrid` axis of this size, position and grid rank."""
    key = (size, axis, ndim)
    it = _ITERATORS.get(key)
    if it is None:
        it = _ITERATORS[key] = Iterator(size, axis, ndim)
    return it


# the iterator of a mask that is a compile-time False: zero rows of the partition axis
NO_ROWS = Iterator(size=0, axis=0, ndim=0)


def skipped(ranges: dict | None) -> bool:
    """True if a mask left the instruction nothing to do (AWS's compiler drops such instructions)."""
    return bool(ranges) and any(hi <= lo for lo, hi in ranges.values())


def restrict(mask: Predicate | None) -> dict:
    """Iterator -> (lo, hi) ranges where the mask holds. Each clause must bound a single iterator."""
    ranges: dict = {}
    if mask is None or mask is True or (isinstance(mask, np.bool_) and mask):
        return ranges
    if mask is False or isinstance(mask, np.bool_):
        # a compile-time False (``mask=(i * 128 < n)`` with ints): the instruction runs on no rows
        return {NO_ROWS: (0, 0)}
    if not isinstance(mask, Predicate):
        raise MaskError(f"mask= expects a predicate built from nl.arange/nl.mgrid, got {type(mask).__name__}")
    for left, op, right in mask.clauses:
        expr = left - right  # expr op 0
        if len(expr.terms) != 1:
            raise MaskError(f"mask clause '{left!r} {op} {right!r}' must involve exactly one iterator")
        (it, coef), = expr.terms
        lo, hi = ranges.get(it, (0, it.size))
        # coef * x + c  op  0: bound x (division by a negative coef flips the inequality)
        c = expr.const
        if op in ("<", "<="):
            limit = -c - (1 if op == "<" else 0)  # coef * x <= limit
            if coef > 0:
                hi = min(hi, limit // coef + 1)
            else:
                lo = max(lo, _ceil_div(limit, coef))
        else:
            limit = -c + (1 if op == ">" else 0)  # coef * x >= limit
            if coef > 0:
                lo = max(lo, _ceil_div(limit, coef))
            else:
                hi = min(hi, limit // coef + 1)
        ranges[it] = (lo, max(lo, hi))
    return ranges


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def expr_iterators(key) -> list[Iterator]:
    """The distinct iterators used in an index key, ordered by tile axis."""
    seen: dict = {}
    for entry in key:
        if isinstance(entry, IndexExpr):
            for it, _ in entry.terms:
                seen[id(it)] = it
            for it in entry.grid:
                seen.setdefault(id(it), it)
    used = {id(it) for entry in key if isinstance(entry, IndexExpr) for it, _ in entry.terms}
    # an axis some index uses already has its iterator: an mgrid output spanning the same axis with
    # the same size is the same dense array there (NumPy broadcasting: `a[i_p, g.x]` with
    # `i_p = nl.arange(128)[:, None]` and `g = nl.mgrid[0:128, 0:512]` is a [128, 512] tile)
    taken = {(it.axis, it.size) for k, it in seen.items() if k in used}
    # an mgrid axis of size 1 that the access does not use adds nothing
    return sorted((it for k, it in seen.items()
                   if k in used or (it.size > 1 and (it.axis, it.size) not in taken)), key=lambda it: it.axis)


def spreads(key, iterators: list[Iterator]) -> bool:
    """True if the access repeats along mgrid axes it does not use (a broadcasting read)."""
    used = {id(it) for entry in key if isinstance(entry, IndexExpr) for it, _ in entry.terms}
    return any(id(it) not in used for it in iterators)


def tile_shape(key, iterators: list[Iterator], ranges: dict | None = None) -> tuple[int, ...]:
    """The tile an access pattern reads: one axis per iterator, in axis order. When the access
    spreads along unused mgrid axes, its own size-1 free axes are dropped (w[i_one, i_f] -> [P, n])."""
    sizes = [(ranges.get(it, (0, it.size))[1] - ranges.get(it, (0, it.size))[0]) if ranges else it.size
             for it in iterators]
    if not spreads(key, iterators):
        grid_ndim = max((it.ndim for it in iterators), default=0)
        from_arange = all(not e.grid for e in key if isinstance(e, IndexExpr))   # not nl.mgrid
        if grid_ndim > len(iterators) and from_arange:
            # ids[nl.arange(64)[:, None]] of a 1-d tensor is a [64, 1] tile: axes no iterator uses are 1
            shape = [1] * grid_ndim
            for it, n in zip(iterators, sizes):
                shape[it.axis] = n
            return tuple(shape)
        return tuple(sizes)
    return tuple(n for k, n in enumerate(sizes) if k == 0 or n != 1)


def resolve(key: tuple, extents: tuple[int, ...], ranges: dict | None, what: str):
    """NumPy index for an access pattern `key` (ints and IndexExprs, one per axis of `extents`).

    Returns (index, shape). Raises IndexOutOfBoundsError naming the axis, the range and the extent.
    """
    iterators = expr_iterators(key)
    axes = [it.axis for it in iterators]
    if len(set(axes)) != len(axes):
        raise MaskError(f"{what}: two different iterators are placed on the same tile axis {axes}")
    for pos, (entry, extent) in enumerate(zip(key, extents)):
        low, high = entry.bounds(ranges) if isinstance(entry, IndexExpr) else (entry, entry)
        if low < 0 or high >= extent:
            raise IndexOutOfBoundsError(
                f"out-of-bounds access on {what}: axis {pos} reaches [{low}, {high}] but the axis has "
                f"extent {extent}", value=(low, high), limit=extent)
    shape = tile_shape(key, iterators, ranges)
    spread = spreads(key, iterators)
    # A plain strided box (each axis a constant or one iterator with positive step, in axis order) -> slices.
    order = [entry.terms[0][0].axis for entry in key if isinstance(entry, IndexExpr) and len(entry.terms) == 1]
    boxable = all(not isinstance(e, IndexExpr) or (len(e.terms) == 1 and e.terms[0][1] > 0) for e in key)
    if boxable and not spread and order == sorted(order) and len(order) == len(iterators):
        index = []
        for entry in key:
            if isinstance(entry, IndexExpr):
                (it, coef), = entry.terms
                lo, hi = ranges.get(it, (0, it.size)) if ranges else (0, it.size)
                start = entry.const + coef * lo
                index.append(slice(start, start + coef * (hi - lo - 1) + 1, coef))
            else:
                index.append(entry)
        return tuple(index), shape
    grid = tuple((ranges.get(it, (0, it.size))[1] - ranges.get(it, (0, it.size))[0]) if ranges else it.size
                 for it in iterators)
    arrays = tuple(np.broadcast_to(entry.values(iterators, ranges) if isinstance(entry, IndexExpr)
                                   else np.asarray(entry, dtype=np.int64), grid) for entry in key)
    return arrays, shape
