"""The loop variable: `LoopIndex`, the value an `nl.affine_range` / `nl.sequential_range` iterator takes
while its loop is being stamped (the trace driver above it is `loops.py`).

A `LoopIndex` is its concrete value, kept a loop index under affine arithmetic (``k * 128 + 64``,
``-k``, sums of loop indices). Tensor indexing, ``nl.ds`` and `nl.arange` read the value (`plain`):
they lead only to access boxes, whose bounds are affine. ``name[k]`` on a Python list is affine when
the list's entries over the whole loop are tiles in affinely placed buffers (checked entry by entry;
finding the list reads the caller's CPython 3.11 bytecode, which is why stamping runs on 3.11 only:
`loops.stamping_supported`), and so is a comparison whose answer is the same in every iteration of
the loops it involves (checked on all of them). Any other use gets the answer an int would give and
*taints* the loop: it runs its remaining iterations concretely, or, if it has stamped already, the
trace starts again (`Retrace`) with that loop concrete.
"""
from __future__ import annotations

import dis
import sys

import numpy as np

from trnlab import config as _config

class Retrace(BaseException):
    """Internal: the trace must start again with these loops (source sites) run concretely.

    A BaseException, so that a kernel's own ``except Exception`` does not swallow it."""

    def __init__(self, sites: tuple, reason: str):
        super().__init__(reason)
        self.sites, self.reason = tuple(sites), reason


# -- the loop variable -------------------------------------------------------------------------
def _taint(terms, what: str) -> None:
    """A non-affine use of a loop index. A loop that has not stamped yet (this is its iteration 0
    or 1, run concretely) just runs the rest of its iterations concretely too — the use gets the
    value an int would give. A loop that has stamped cannot take it back: trace again."""
    stamped = [loop for loop, _ in terms if loop.stamped]
    if stamped:
        for loop in stamped:
            loop.tracer.poisoned = True
            loop.tracer.abandoned.append(loop.site)
        raise Retrace(tuple(loop.site for loop in stamped), f"loop index used non-affinely: {what}")
    for loop, _ in terms:
        if loop.active:
            loop.degrade(f"loop index used non-affinely: {what}")


def _merge(a: tuple, b: tuple, sign: int) -> tuple:
    coefs = dict(a)
    for loop, c in b:
        coefs[loop] = coefs.get(loop, 0) + sign * c
    return tuple((loop, c) for loop, c in coefs.items() if c)


class LoopIndex:
    """The iterator of a stamped loop: its concrete value, kept a loop index under affine
    arithmetic; any other use taints the loop (see the module docstring). Not an ``int``
    subclass on purpose: CPython indexes lists and tuples with an int subclass's value without
    asking it, which would let ``table[k]`` escape unseen."""

    __slots__ = ("_v", "_terms")

    def __init__(self, value: int, terms: tuple):
        self._v = value
        self._terms = terms          # ((loop, coefficient), ...)

    def _check(self):
        for loop, _ in self._terms:
            if not loop.active and loop.stamped:
                # after a loop that stamped: a value carried out of it may be stale (acc = acc + k)
                _taint(self._terms, "after its loop ended")

    def _with(self, other, sign: int):
        self._check()
        t = type(other)
        if t is LoopIndex:
            other._check()
            terms = _merge(self._terms, other._terms, sign)
            value = self._v + sign * other._v
        elif t is int or (isinstance(other, int) and not isinstance(other, bool)):
            terms, value = self._terms, self._v + sign * int(other)
        elif isinstance(other, (int, float, complex, np.number)):
            _taint(self._terms, f"arithmetic with a {type(other).__name__}")
            return self._v + sign * other
        else:
            return NotImplemented
        return LoopIndex(value, terms) if terms else value

    def __add__(self, other):
        return self._with(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._with(other, -1)

    def __rsub__(self, other):
        result = self._with(other, -1)
        return NotImplemented if result is NotImplemented else -result

    def __neg__(self):
        self._check()
        return LoopIndex(-self._v, tuple((loop, -c) for loop, c in self._terms))

    def __pos__(self):
        self._check()
        return self

    def __mul__(self, other):
        self._check()
        if type(other) is LoopIndex:
            return _non_affine_mul(self, other)
        if type(other) is int or (isinstance(other, int) and not isinstance(other, bool)):
            k = int(other)
            if not k:
                return 0
            return LoopIndex(self._v * k, tuple((loop, c * k) for loop, c in self._terms))
        if isinstance(other, (int, float, complex, np.number, LoopIndex)):
            return _non_affine_mul(self, other)
        return NotImplemented

    __rmul__ = __mul__

    def __repr__(self):
        return f"LoopIndex({self._v})"

    @property
    def __class__(self):
        """isinstance(k, int) holds, as for the int of a concrete trace (type(k) is LoopIndex)."""
        return int


def _refuse(name: str):
    method = getattr(int, name)

    def refused(self, *args):
        values = tuple(a._v if type(a) is LoopIndex else a for a in args)
        if name in _COMPARISONS and _same_everywhere(self, method, args):
            return method(self._v, *values)
        _taint(self._terms, name)
        return method(self._v, *values)
    refused.__name__ = name
    return refused


_COMPARISONS = {"__bool__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}
_MAX_POINTS = 4096
PEEL_ITERATIONS = 5     # a loop peels its last iteration only if it has this many (0, 1, one stamped, n-2, n-1)


def _same_everywhere(k: "LoopIndex", method, args) -> bool:
    """Does the comparison give the same answer in every iteration of every loop it involves (so
    that stamped iterations would branch the same way)? Checked on all of them."""
    terms = k._terms
    if args:
        other = args[0]
        if type(other) is LoopIndex:
            terms = _merge(terms, other._terms, -1)
            offset = k._v - other._v
            compare = lambda x: method(x, 0)  # noqa: E731  (k - other against 0)
        elif type(other) is int:
            offset = k._v
            compare = lambda x: method(x, other)  # noqa: E731
        else:
            return False
    else:
        offset, compare = k._v, method
    if not terms:
        return True
    grid = [offset]
    for loop, coef in terms:
        if loop.current is None or loop.degraded is not None or (not loop.active and loop.stamped):
            return False
        now = loop.values[loop.current]
        steps = [coef * (v - now) for v in loop.values]
        if len(grid) * len(steps) > _MAX_POINTS:
            return False
        grid = [g + d for g in grid for d in steps]
    first = compare(grid[0])
    if all(compare(x) == first for x in grid):
        return True
    # the answer changes in the last iteration only, of the one loop involved (a remainder tile:
    # ``min(TILE, S - k * TILE)``): that iteration is peeled — traced concretely after the stamped
    # ones and iteration n-2, which is checked against the prediction instead (loops.Loop)
    if _config.fast() and len(terms) == 1:
        loop = terms[0][0]
        if (len(loop.values) >= PEEL_ITERATIONS and (getattr(loop, "peel", False) or not loop.stamped)
                and loop.current < len(loop.values) - 1 and all(compare(x) == first for x in grid[:-1])):
            loop.peel = True
            return True
    return False


for _name in ("__bool__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
              "__int__", "__float__", "__complex__" if hasattr(int, "__complex__") else "__float__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__",
              "__divmod__", "__rdivmod__", "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "__and__",
              "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__", "__rlshift__", "__rshift__",
              "__rrshift__", "__invert__", "__abs__", "__round__", "__trunc__", "__floor__", "__ceil__",
              "__format__", "__str__", "__reduce__", "__reduce_ex__", "bit_length", "to_bytes", "conjugate",
              "as_integer_ratio"):
    setattr(LoopIndex, _name, _refuse(_name))


def _index(self):
    """k as a list index: affine if the list is a Python name indexed by `name[k]` whose entries,
    over every iteration of k's loop, are tiles in affinely placed buffers (or affine ints)."""
    frame = sys._getframe(1)
    if len(self._terms) == 1 and _affine_entries(self, frame):
        return self._v
    _taint(self._terms, "__index__")
    return self._v


_SUBSCRIPT = {}      # (code, offset) -> how to find the list a BINARY_SUBSCR there indexes, or None
_LOADS = {"LOAD_FAST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_CLOSURE", "LOAD_CONST"}


def _subscripted_name(code, at: int):
    """The expression of the list subscripted at `at`: (name, key, key, ...) for `name[key]...[k]`
    (each key a (load, name-or-constant)), or None for anything more involved."""
    key = (code, at)
    if key not in _SUBSCRIPT:
        chain = None
        instructions = list(dis.get_instructions(code))
        k = next((i for i, ins in enumerate(instructions) if ins.offset == at), None)
        if k is not None and instructions[k].opname == "BINARY_SUBSCR" and k >= 2 \
                and instructions[k - 1].opname in _LOADS:
            keys, k = [], k - 2
            while k >= 0:
                ins = instructions[k]
                if ins.opname in _LOADS and ins.opname != "LOAD_CONST":
                    chain = ((ins.opname, ins.argval),) + tuple(reversed(keys))
                    break
                if ins.opname == "BINARY_SUBSCR" and k >= 2 and instructions[k - 1].opname in _LOADS:
                    keys.append((instructions[k - 1].opname, instructions[k - 1].argval))
                    k -= 2
                    continue
                break
        _SUBSCRIPT[key] = chain
    return _SUBSCRIPT[key]


def _load(frame, op: str, name):
    if op == "LOAD_CONST":
        return name
    if op in ("LOAD_GLOBAL", "LOAD_NAME") and name not in frame.f_locals:
        return frame.f_globals.get(name, frame.f_builtins.get(name))
    return frame.f_locals.get(name)


def _affine_entries(k: "LoopIndex", frame) -> bool:
    chain = _subscripted_name(frame.f_code, frame.f_lasti)
    if chain is None:
        return False
    entries = _load(frame, *chain[0])
    for op, name in chain[1:]:                 # lhsT_tiles[bm][k]: the row of a plain index
        index = _load(frame, op, name)
        if type(index) is not int or type(entries) not in (list, tuple) or not -len(entries) <= index < len(entries):
            return False
        entries = entries[index]
    if type(entries) is not list and type(entries) is not tuple:
        return False
    (loop, coef), = k._terms
    if not loop.active or loop.current is None:
        return False
    values = loop.values
    now = values[loop.current]
    indices = [k._v + coef * (v - now) for v in values]
    if min(indices) < 0 or max(indices) >= len(entries):
        return False
    picked = [entries[i] for i in indices]
    first = picked[0]
    if type(first) is int:
        row = lambda e: [e] if type(e) is int else None  # noqa: E731
        shape = lambda e: ()  # noqa: E731
    else:
        from trnlab.nki.tensor import NkiTensor
        if type(first) is not NkiTensor:
            return False
        ids = loop.tracer.recorder._ids

        def row(e):
            if type(e) is not NkiTensor or e._emit is not None or e._ap is not None or e._gather is not None \
                    or e._valid is not None or e._rotate is not None or e._storage is not None:
                return None
            bid = ids.get(id(e._hw))
            if bid is None:
                return None
            out = [bid]
            for part in e._index or ():
                if type(part) is int:
                    out.append(part)
                elif type(part) is slice and type(part.start) is int and type(part.stop) is int:
                    out.append(part.start)
                else:
                    return None
            return out

        def shape(e):
            lengths = tuple((p.stop - p.start, p.step) if type(p) is slice else None for p in (e._index or ()))
            return (e.shape, str(e.dtype), e.buffer, e._owner is None, lengths, len(e._index or ()))
    rows = [row(e) for e in picked]
    if any(r is None for r in rows) or len({len(r) for r in rows}) != 1:
        return False
    if len({shape(e) for e in picked}) != 1:
        return False
    table = np.array(rows, dtype=np.int64)
    if len(table) > 1:
        step = table[1] - table[0]
        if not np.array_equal(table, table[0] + np.arange(len(table))[:, None] * step):
            return False
    return True


LoopIndex.__index__ = _index


def _non_affine_mul(self, other):
    """k * 0.5, k * k: the int (or float) result, and the loop runs concretely."""
    _taint(self._terms, f"multiplied by a {type(other).__name__}")
    return self._v * (other._v if type(other) is LoopIndex else other)


def _array(self, *args, **kwargs):
    _taint(self._terms, "__array__")
    return np.asarray(self._v, *args, **kwargs)


LoopIndex.__array__ = _array


def plain(x):
    """The concrete value of a possible loop index (for indexing: an access box is affine in it)."""
    if type(x) is LoopIndex:
        x._check()
        return x._v
    return x


def plain_slice(s: slice) -> slice:
    if type(s.start) is LoopIndex or type(s.stop) is LoopIndex or type(s.step) is LoopIndex:
        return slice(plain(s.start), plain(s.stop), plain(s.step))
    return s


def plain_key(key: tuple) -> tuple:
    """An index key with every loop index replaced by its value (ints and slice fields)."""
    out = None
    for pos, k in enumerate(key):
        t = type(k)
        if t is LoopIndex:
            new = plain(k)
        elif t is slice and (type(k.start) is LoopIndex or type(k.stop) is LoopIndex
                             or type(k.step) is LoopIndex):
            new = plain_slice(k)
        else:
            continue
        if out is None:
            out = list(key)
        out[pos] = new
    return key if out is None else tuple(out)
