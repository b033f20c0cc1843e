"""Loop tracing: an `nl.affine_range` / `nl.sequential_range` loop traced in a few iterations, the
others stamped out from them.

Tracing runs a kernel's Python once per input shape; a tiled kernel spends almost all of that
time running the same loop body again and again with another iteration number. In neuronxcc-era
NKI these loops were symbolic for the same reason — AWS's docs say ``affine_range`` and
``sequential_range`` keep the compiler from unrolling the loop until its backend, while
``static_range`` (and, in NKI 0.7 and later, every range) is unrolled while the kernel is traced.

Here a loop of n >= 4 iterations whose body uses its iterator only affinely is traced like this:

1. iterations 0 and 1 run as usual, except that the iterator is a `LoopIndex` — its concrete
   value, which stays a loop index under affine arithmetic (``k * 128 + 64``, ``-k``, sums of loop
   indices). Tensor indexing, ``nl.ds`` and `nl.arange` expressions read the value (`plain`): they
   lead only to access boxes, whose bounds are affine. ``name[k]`` on a Python list is affine when
   the list's entries over the whole loop are tiles in affinely placed buffers (checked entry by
   entry), and so is a comparison whose answer is the same in every iteration of the loops it
   involves (checked on all of them). Any other use (``bool``, comparisons, ``hash``, ``int()``,
   ``range(k)``, ``//``, ``%``, ``str``, floats, a product of two indices) gets the answer an int
   would give, and the loop runs its remaining iterations concretely;
2. the records of the two iterations (instructions with operands, boxes, attributes, source
   lines and their descriptions, and the buffers allocated in the body) are flattened into a
   structure, constants and integers. Same structure and constants required (slice lengths and
   buffer shapes included); the integers (buffer ids, offsets, first/last uses, name counters)
   give ``V0`` and a step ``D``;
3. iterations 2 .. n-2 are stamped out: ``V0 + j * D`` is filled into generated builder functions
   (one per record structure), appended to the program where a concrete trace would put them; the
   allocation name counters advance as they would have;
4. iteration n-1 runs concretely again (so Python variables after the loop hold what they would)
   and must give exactly ``V0 + (n-1) * D``; its rule checks are the far corner's, which is exact
   for affine bounds.

Soundness. Before anything is stamped, every doubt runs the loop concretely from where it is (the
records so far are the concrete trace's): a non-affine use, iterations 0 and 1 differing, plain
Python state carried between them (an ``int``/``float``/``str`` local that changes, a list or dict
whose length changes), an HBM tensor allocated in the body. After stamping, a surprise — the last
iteration not as predicted, a loop index used after its loop, a ``break`` in the last iteration —
and, at any time, a result pending at an iteration boundary that the next statement assigns
(the boundary issued it into a tile of its own) raises `Retrace`: tracing
is a pure function of the input shapes, so the whole kernel is traced again with that loop (named
by its source line) concrete. An error raised by a trace that stamped is raised by a concrete trace
instead, so messages and kernel lines are today's. `tests/test_trace_loops.py` compares stamped
and concrete traces record for record on every kernel of `trnlab.kernels`; ``TRNLAB_CHECK_LOOPS=1``
makes every trace of a process do both and compare.
"""
from __future__ import annotations

import dis
import os
import sys

import numpy as np

from trnlab.hardware.program import Access, Buffer, Instruction

MIN_ITERATIONS = 4          # fewer: nothing to stamp (iterations 0, 1 and n-1 run concretely)
MAX_RETRACES = 12           # then trace with every loop concrete
# TRNLAB_CHECK_LOOPS=1: every trace is also done concretely and must agree record for record
CHECK = os.environ.get("TRNLAB_CHECK_LOOPS", "") not in ("", "0")


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
    return all(compare(x) == first for x in grid)


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


# -- flattening records ------------------------------------------------------------------------
_INSTRUCTION_FIELDS = ("opcode", "engine", "operands", "attrs", "line", "region", "source", "issue")
_BUFFER_FIELDS = ("id", "name", "memory", "shape", "dtype", "partition_axis", "role", "first", "last",
                  "offset", "placement", "data", "alias_of")


class _Mismatch(Exception):
    pass


def _node(x, ints: list, consts: list):
    """The structure of `x` (hashable); its integers go to `ints`, everything else to `consts`."""
    t = type(x)
    if t is int:
        ints.append(x)
        return "i"
    if t is tuple:
        return ("t",) + tuple([_node(e, ints, consts) for e in x])
    if t is slice:
        start, stop = x.start, x.stop
        if type(start) is int and type(stop) is int:
            ints.append(start)
            consts.append(stop - start)          # the length must not change between iterations
            consts.append(x.step)
            return "s"
        consts.append(x)
        return "c"
    if t is Access:
        return ("A", _node(x.buffer, ints, consts), _node(x.index, ints, consts))
    if t is dict:
        if all(type(key) is str for key in x):
            return ("d", tuple(x)) + tuple([_node(v, ints, consts) for v in x.values()])
        consts.append(x)
        return "c"
    if t is list:
        return ("l",) + tuple([_node(e, ints, consts) for e in x])
    consts.append(x)
    return "c"


def _buffer_node(b: Buffer, ints: list, consts: list):
    d = b.__dict__
    if len(d) != len(_BUFFER_FIELDS):
        raise _Mismatch("a buffer with extra attributes")
    ints.append(b.id)
    name = b.name
    if type(name) is str:
        base = name.rstrip("0123456789")
        digits = name[len(base):]
        if digits and digits[0] != "0":           # a count > 0 written as str(count) writes it
            consts.append(base)
            ints.append(int(digits))
        else:
            consts.append(name)                   # count 0: the base name itself
            ints.append(0)
        name_node = "n"
    else:
        consts.append(name)
        name_node = "c"
    consts.extend((b.memory, b.shape, b.dtype, b.partition_axis, b.role))
    ints.append(b.first)
    ints.append(b.last)
    consts.extend((b.offset, b.placement, b.data, b.alias_of))
    return ("B", name_node)


def _instruction_node(r: Instruction, ints: list, consts: list):
    d = r.__dict__
    if len(d) != len(_INSTRUCTION_FIELDS):
        raise _Mismatch("an instruction with extra attributes")
    return ("I",) + tuple([_node(d[f], ints, consts) for f in _INSTRUCTION_FIELDS])


def _same_consts(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        if type(x) is np.ndarray:
            if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y):
                return False
        elif type(x) is float:
            if x != y and not (x != x and y != y):
                return False
        else:
            try:
                if not (x == y):
                    return False
            except Exception:
                return False
    return True


# -- builders: one generated function per record structure -------------------------------------
_BUILDERS: dict = {}


def _code(node, counters: list, lines: list) -> str:
    """Python expression rebuilding `node` from v[o + i] (integers), k[c] (constants) and s[k[c]]
    (parts shared within an iteration, `_Template`). Records (instructions, accesses, buffers) are
    made by statements appended to `lines` — a bare object given its attributes one by one, no
    __init__ call — and the expression names them."""
    if node == "i":
        i = counters[0]
        counters[0] += 1
        return f"v[o+{i}]"
    if node == "c":
        c = counters[1]
        counters[1] += 1
        return f"k[{c}]"
    if node == "s":
        i, c = counters
        counters[0] += 1
        counters[1] += 2
        return f"slice(v[o+{i}], v[o+{i}]+k[{c}], k[{c + 1}])"
    kind = node[0]
    if kind == "R":                 # a part an earlier record of this iteration built (_Template)
        c = counters[1]
        counters[1] += 1
        return f"s[k[{c}]]"
    if kind == "P":                 # a part later records share: built here, kept in s
        inner = _code(node[1], counters, lines)
        c = counters[1]
        counters[1] += 1
        name = f"x{len(lines)}"
        lines.append(f"{name} = {inner}; s[k[{c}]] = {name}")
        return name
    if kind == "t":
        parts = [_code(n, counters, lines) for n in node[1:]]
        return "(" + "".join(p + ", " for p in parts) + ")"
    if kind == "l":
        return "[" + ", ".join(_code(n, counters, lines) for n in node[1:]) + "]"
    if kind == "d":
        keys = node[1]
        return "{" + ", ".join(f"{key!r}: {_code(n, counters, lines)}" for key, n in zip(keys, node[2:])) + "}"
    if kind == "A":
        b = _code(node[1], counters, lines)
        index = _code(node[2], counters, lines)
        return _record(lines, "_Access", [("buffer", b), ("index", index)])
    if kind == "I":
        fields = [(f, _code(n, counters, lines)) for f, n in zip(_INSTRUCTION_FIELDS, node[1:])]
        return _record(lines, "_Instruction", fields)
    if kind == "B":
        i, c = counters
        bid = f"v[o+{i}]"
        counters[0] += 1
        if node[1] == "n":
            name = f"(k[{c}] + str(v[o+{i + 1}]) if v[o+{i + 1}] else k[{c}])"
            counters[0] += 1
        else:
            name = f"k[{c}]"
        c += 1
        i = counters[0]
        counters[0] += 2
        counters[1] = c + 9
        return _record(lines, "_Buffer", [
            ("id", bid), ("name", name), ("memory", f"k[{c}]"), ("shape", f"k[{c + 1}]"), ("dtype", f"k[{c + 2}]"),
            ("partition_axis", f"k[{c + 3}]"), ("role", f"k[{c + 4}]"), ("first", f"v[o+{i}]"),
            ("last", f"v[o+{i + 1}]"), ("offset", f"k[{c + 5}]"), ("placement", f"k[{c + 6}]"),
            ("data", f"k[{c + 7}]"), ("alias_of", f"k[{c + 8}]")])
    raise ValueError(f"unknown record node {node!r}")


def _record(lines: list, cls: str, fields: list) -> str:
    """A statement making a bare `cls` and storing its `fields` ((name, expression), in the
    dataclass's field order, as its __init__ would set them: the instance keeps its attributes in
    the compact layout its class's instances share, which is faster to make than an attribute dict
    and smaller); returns the variable holding it."""
    name = f"r{len(lines)}"
    stores = "".join(f"; {name}.{f} = {expression}" for f, expression in fields)
    lines.append(f"{name} = _new({cls}){stores}")
    return name


def _builder(node):
    fn = _BUILDERS.get(node)
    if fn is None:
        counters, lines = [0, 0], []
        result = _code(node, counters, lines)
        body = "".join(f"    {line}\n" for line in lines)
        source = f"def build(v, o, k, s=None):\n{body}    return {result}\n"
        scope = {"_new": object.__new__, "_Access": Access, "_Instruction": Instruction, "_Buffer": Buffer,
                 "slice": slice, "str": str}
        exec(compile(source, "<trnlab.nki.loops builder>", "exec"), scope)
        fn = _BUILDERS[node] = scope["build"]
        fn.ints, fn.consts = counters
    return fn


_INTS: dict = {}
_BIDS: dict = {}


def _bid_slots(node) -> tuple:
    """Positions, among a record's integers, of its operands' buffer ids."""
    slots = _BIDS.get(node)
    if slots is None:
        out, at = [], 0
        stack = [node]

        def walk(n):
            nonlocal at
            if n == "i" or n == "s":
                at += 1
                return
            if n == "c":
                return
            kind = n[0]
            if kind == "B":
                at += _ints(n)
                return
            if kind == "A" and n[1] == "i":
                out.append(at)
            for child in (n[2:] if kind == "d" else n[1:]):
                walk(child)
        walk(stack[0])
        slots = _BIDS[node] = tuple(out)
    return slots


def _ints(node) -> int:
    """How many integers a record structure holds."""
    count = _INTS.get(node)
    if count is None:
        if node == "i" or node == "s":
            count = 1
        elif node == "c":
            count = 0
        elif node[0] == "d":
            count = sum(_ints(n) for n in node[2:])
        elif node[0] == "B":
            count = 4 if node[1] == "n" else 3
        else:
            count = sum(_ints(n) for n in node[1:])
        _INTS[node] = count
    return count


_CONSTS: dict = {}


def _nconsts(node) -> int:
    """How many constants a record structure holds (in the order `_node` flattens them)."""
    count = _CONSTS.get(node)
    if count is None:
        if node == "i":
            count = 0
        elif node == "c":
            count = 1
        elif node == "s":
            count = 2
        elif node[0] == "d":
            count = sum(_nconsts(n) for n in node[2:])
        elif node[0] == "B":
            count = 10
        else:
            count = sum(_nconsts(n) for n in node[1:])
        _CONSTS[node] = count
    return count


_SHAREABLE: dict = {}


def _shareable(node) -> bool:
    """Only immutable parts are shared: tuples and accesses of integers, slices and constants."""
    answer = _SHAREABLE.get(node)
    if answer is None:
        if node == "i" or node == "s" or node == "c":
            answer = True
        elif node[0] in ("t", "A"):
            answer = all(_shareable(c) for c in node[1:])
        else:
            answer = False
        _SHAREABLE[node] = answer
    return answer


def _strict(x):
    """A hashable key equal for two values only if they are equal and of the same types all the
    way down (1, 1.0, True and -0.0, 0.0 differ); any other object stands for itself."""
    t = type(x)
    if t is int or t is str or x is None:
        return x
    if t is tuple:
        return ("t",) + tuple([_strict(e) for e in x])
    if t is slice:
        return ("s", _strict(x.start), _strict(x.stop), _strict(x.step))
    if t is Access:
        return ("A", _strict(x.buffer), _strict(x.index))
    if t is float:
        return ("f", x.hex())
    if t is bool:
        return ("b", x)
    return ("o", id(x))


class _Template:
    """How the records of one structure, with one pattern of varying integers, are rebuilt by the
    outermost stamping loop. A part whose integers do not vary is not rebuilt: the record of
    iteration 0 lends it (records are never modified, nor are their parts). An access or a tuple
    nested in a record that does vary may be equal, in every iteration, to one an earlier record
    of the iteration builds — same structure, same constants, same integers in iteration 0 and
    same steps: then it is built once per iteration and shared. `shares` lists those candidates in
    pre-order: (structure, first and end integer, first and end constant, descendants that are
    candidates too). A variant per set of decisions ("P": built here and published to the list
    the builders share, "R": read from there, "-": built here only, None: inside an "R") gives the
    reduced structure, the integers its builder reads and a function making its constants."""

    __slots__ = ("node", "mask", "shares", "variants")

    def __init__(self, node, mask: tuple):
        self.node, self.mask = node, mask
        self.shares: list = []
        self.variants: dict = {}
        self._walk(node, 0, 0, top=True, nested=False, decisions=None, out=None)

    def _walk(self, node, ip: int, cp: int, top: bool, nested: bool, decisions, out, path: str = "r"):
        """Pre-order over `node` (integers from ip, constants from cp): candidates to `shares`
        (decisions None), or the reduced structure with `out` = (positions, constant expressions,
        decision cursor)."""
        ni = _ints(node)
        if not top and not any(self.mask[ip:ip + ni]):
            if out is not None:
                out[1].append(f"k[{cp}]" if node == "c" else path)
            return "c"
        if node == "i" or node == "s":
            if out is not None:
                out[0].append(ip)
                if node == "s":
                    out[1].extend((f"k[{cp}]", f"k[{cp + 1}]"))
            return node
        kind = node[0]
        if kind == "B":
            if out is not None:
                out[0].extend(range(ip, ip + ni))
                out[1].extend(f"k[{cp + c}]" for c in range(10))
            return node
        decision = None
        if nested and (kind == "t" or kind == "A") and _shareable(node):
            if out is None:
                index = len(self.shares)
                self.shares.append([node, ip, ip + ni, cp, cp + _nconsts(node), 0])
            else:
                index = out[2][0]
                out[2][0] += 1
                decision = decisions[index]
                if decision == "R" or decision == "P":
                    taken = out[2][1]                              # its slot: taken[] in pre-order
                    out[2][1] += 1
                if decision == "R":
                    out[2][0] += self.shares[index][5]             # its candidates are not visited
                    out[1].append(f"s[{taken}]")
                    return ("R",)
        children = []
        if kind == "I":
            for f, child in zip(_INSTRUCTION_FIELDS, node[1:]):
                children.append(self._walk(child, ip, cp, False, False, decisions, out, f"r.{f}"))
                ip += _ints(child)
                cp += _nconsts(child)
            reduced = ("I",) + tuple(children)
        else:
            if kind == "d":
                parts = [(child, f"{path}[{key!r}]") for key, child in zip(node[1], node[2:])]
            elif kind == "A":
                parts = [(node[1], f"{path}.buffer"), (node[2], f"{path}.index")]
            else:                                                  # "t", "l"
                parts = [(child, f"{path}[{i}]") for i, child in enumerate(node[1:])]
            for child, child_path in parts:
                children.append(self._walk(child, ip, cp, False, True, decisions, out, child_path))
                ip += _ints(child)
                cp += _nconsts(child)
            reduced = (node[:2] if kind == "d" else (kind,)) + tuple(children)
        if out is None and nested and (kind == "t" or kind == "A") and _shareable(node):
            self.shares[index][5] = len(self.shares) - index - 1
        if decision == "P":
            out[1].append(f"s[{taken}]")
            return ("P", reduced)
        return reduced

    def variant(self, decisions: tuple):
        """(builder, positions of its integers in the record's, constants function) for these
        decisions; the function takes (record, its flattened constants, slots of its "P"/"R")."""
        found = self.variants.get(decisions)
        if found is None:
            positions, exprs = [], []
            reduced = self._walk(self.node, 0, 0, top=True, nested=False, decisions=decisions,
                                 out=(positions, exprs, [0, 0]))
            source = f"def consts(r, k, s):\n    return ({''.join(e + ', ' for e in exprs)})\n"
            scope: dict = {}
            exec(compile(source, "<trnlab.nki.loops constants>", "exec"), scope)
            found = self.variants[decisions] = (_builder(reduced), tuple(positions), scope["consts"])
        return found


_TEMPLATES: dict = {}


def _reduced_plan(plan: list, records: list, v0: np.ndarray, dv: np.ndarray) -> tuple:
    """The builders of the outermost stamping loop (`_Template`): per record of an iteration
    (builder, offset of its integers among the varying ones read, constants), the positions of
    those integers among all of the iteration's, and how many parts an iteration shares."""
    v0l, dvl = v0.tolist(), dv.tolist()
    slots: dict = {}          # candidate's key -> slot
    uses: list = []           # per slot: how many records read it
    chosen = []
    for (fn, o, k, node), record in zip(plan, records):
        steps = dvl[o:o + fn.ints]
        mask = tuple(map(bool, steps))
        template = _TEMPLATES.get((node, mask))
        if template is None:
            template = _TEMPLATES[(node, mask)] = _Template(node, mask)
        decisions, taken = [], []
        skip = 0
        for index, (sub, a, b, c, d, inside) in enumerate(template.shares):
            if index < skip:
                decisions.append(None)
                continue
            key = (sub, tuple(v0l[o + a:o + b]), tuple(steps[a:b]), tuple(map(_strict, k[c:d])))
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = len(uses)
                uses.append(0)
                decisions.append("P")
            else:
                uses[slot] += 1
                decisions.append("R")
                skip = index + 1 + inside
            taken.append(slot)
        chosen.append((template, decisions, taken, o, k, record))
    reduced_plan = []
    positions: list = []
    for template, decisions, taken, o, k, record in chosen:
        if "P" in decisions:           # a part nothing reads is built, not published
            at = 0
            kept = []
            for index, decision in enumerate(decisions):
                if decision == "P" or decision == "R":
                    if decision == "P" and not uses[taken[at]]:
                        decisions[index] = "-"
                    else:
                        kept.append(taken[at])
                    at += 1
            taken = kept
        builder, reads, make_consts = template.variant(tuple(decisions))
        reduced_plan.append((builder, len(positions), make_consts(record, k, taken)))
        positions.extend(map(o.__add__, reads))
    return reduced_plan, np.array(positions, dtype=np.int64), len(uses)


def _note_stamped_tiles(program, buffer_plan: list, templates: list, v0: np.ndarray, dv: np.ndarray, n: int) -> None:
    """Give allocation by liveness the rows of the buffers just stamped as arrays (ids, first and
    last uses from `V0 + j * D`; memory, size and placement from iteration 0's buffers, which
    their builders copy): `allocate.note_stamped_tiles`."""
    from trnlab.hardware.allocate import _MEMORY_CODES, StampedTiles, note_stamped_tiles
    if not buffer_plan:
        return
    at = {"id": [], "first": [], "last": []}
    for fn, o, k, node in buffer_plan:        # a buffer's integers: id, [name counter], first, last
        at["id"].append(o)
        at["first"].append(o + fn.ints - 2)
        at["last"].append(o + fn.ints - 1)
    iterations = np.arange(2, n - 1, dtype=np.int64)[:, None]

    def column(where: list) -> np.ndarray:      # [iteration, record] -> one row per stamped buffer
        where = np.array(where, dtype=np.int64)
        return (v0[where][None, :] + iterations * dv[where][None, :]).ravel()
    ids = column(at["id"])
    start = len(program.buffers) - len(ids)
    if not np.array_equal(ids, np.arange(start, start + len(ids))):
        return
    repeat = len(iterations)
    memories = np.tile([_MEMORY_CODES.get(b.memory, 0) for b in templates], repeat)
    sizes = np.tile([b.partition_bytes if b.on_chip else 0 for b in templates], repeat)
    placed = np.tile([bool(b.placement) for b in templates], repeat)
    note_stamped_tiles(program, StampedTiles(start, start + len(ids), column(at["first"]), column(at["last"]),
                                             memories, sizes, placed))


# -- one loop being traced ---------------------------------------------------------------------
def consumed(tracer, value) -> None:
    """Called when a tile is assigned (`out[...] = value`, `acc += value`): if it is the result a
    loop boundary issued and nothing happened since, the concrete trace would have issued it
    straight into the destination — trace that loop concretely."""
    flushed = tracer.flushed
    if flushed[0] is not value:
        return
    tracer.flushed = None
    tile, instructions, buffers, loop = flushed
    program = tracer.program
    if len(program.instructions) == instructions and len(program.buffers) == buffers:
        loop._fail("a functional result pending at an iteration boundary is assigned right after it")


def _plain_value(x):
    t = type(x)
    if t is int or t is float or t is str or t is bool or x is None:
        return True
    if t is tuple:
        return all(_plain_value(e) for e in x)
    return False


def _state(frame) -> dict:
    """What of the loop's frame could carry Python state from one iteration to the next."""
    state = {}
    for name, value in frame.f_locals.items():
        t = type(value)
        if t is list or t is dict or t is set:
            state[name] = (t, len(value))
        elif _plain_value(value):
            state[name] = (t, value)
    return state


class _Records:
    """The flattened records of one iteration: structure, integers, constants."""

    __slots__ = ("nodes", "ints", "consts", "plan")

    def __init__(self, tracer, instructions, buffers):
        ints, consts, nodes = [], [], []
        known = tracer.known
        for r in instructions:
            flat = known.get(id(r))
            if flat is None:
                nodes.append(_instruction_node(r, ints, consts))
            else:
                nodes.append(flat[0])
                ints.extend(flat[1])
                consts.extend(flat[2])
        for b in buffers:
            nodes.append(_buffer_node(b, ints, consts))
        self.nodes, self.ints, self.consts = nodes, ints, consts

    def same_shape(self, other: "_Records") -> bool:
        return self.nodes == other.nodes and _same_consts(self.consts, other.consts)


class Loop:
    """One execution of a stamped loop (its iterations 0, 1 and n-1 run; the others stamped)."""

    def __init__(self, tracer: "LoopTracer", site: tuple, values: range, frame):
        self.tracer, self.site, self.values, self.frame = tracer, site, values, frame
        self.active = True
        self.stamped = False
        self.degraded = None      # why the loop runs concretely after all
        self.current = None       # the iteration running (0, 1 or n-1)
        self.marks = []           # per boundary: (instructions, buffers, names)

    def _fail(self, reason: str):
        """After stamping: the stamped records may be wrong, trace the kernel again."""
        self.tracer.poisoned = True
        self.tracer.abandoned.append(self.site)
        raise Retrace((self.site,), reason)

    def degrade(self, reason: str) -> None:
        """Before stamping: run the remaining iterations concretely (the records so far are the
        concrete trace's), and this loop concretely for the rest of the trace."""
        if self.degraded is None:
            self.degraded = reason
            self.tracer.concrete.add(self.site)
            fallbacks.append(((self.site,), reason))

    def _boundary(self):
        launch = self.tracer.launch
        program = self.tracer.program
        pending = launch.pending
        if pending is not None:
            # issue a functional result left pending (the next NKI call would): iterations then
            # start alike. Only an assignment of it as the very next action (`out[...] = t`) would
            # have written it elsewhere; `consumed` catches that and falls back
            launch.flush()
            self.tracer.flushed = (pending, len(program.instructions), len(program.buffers), self)
        self.marks.append((len(program.instructions), len(program.buffers), dict(launch.names)))

    def index(self, j: int) -> LoopIndex:
        self.current = j
        return LoopIndex(self.values[j], ((self, self.values.step),))

    def begin(self):
        self._boundary()

    def after_first(self):
        self._boundary()
        self.state = _state(self.frame)

    def after_second(self):
        """Check iterations 0 and 1 against each other, then stamp iterations 2 .. n-2."""
        self._boundary()
        if _state(self.frame) != self.state:
            changed = sorted(name for name, v in _state(self.frame).items() if self.state.get(name) != v)
            return self.degrade(f"Python state carried between iterations: {', '.join(changed) or '?'}")
        (i0, b0, n0), (i1, b1, n1), (i2, b2, n2) = self.marks
        program = self.tracer.program
        buffers = program.buffers
        if any(buffers[b].memory not in ("sbuf", "psum") for b in range(b0, b2)):
            return self.degrade("an HBM tensor allocated in the loop body")
        try:
            first = _Records(self.tracer, program.instructions[i0:i1], buffers[b0:b1])
            second = _Records(self.tracer, program.instructions[i1:i2], buffers[b1:b2])
        except _Mismatch as error:
            return self.degrade(str(error))
        if not first.same_shape(second):
            return self.degrade("iterations 0 and 1 differ in structure or constants")
        step = {}
        for key in set(n1) | set(n2):
            d = n2.get(key, 0) - n1.get(key, 0)
            if d != n1.get(key, 0) - n0.get(key, 0):
                return self.degrade(f"allocation names {key!r} counted differently in iterations 0 and 1")
            if d:
                step[key] = d
        v0 = np.array(first.ints, dtype=np.int64)
        dv = np.array(second.ints, dtype=np.int64) - v0
        # an operand whose buffer changes from one iteration to the next must be a tile of the
        # body (one per iteration); another buffer would need its own first/last use updated
        bids, o = [], 0
        for node in first.nodes[:i1 - i0]:
            bids.extend(o + slot for slot in _bid_slots(node))
            o += _ints(node)
        outside = None
        if bids:
            bids = np.array(bids, dtype=np.int64)
            moving = dv[bids] != 0
            if moving.any():
                starts = v0[bids][moving]
                own = (starts >= b0) & (starts < b1)
                if (dv[bids][moving][own] != b1 - b0).any():
                    return self.degrade("an operand moves to another buffer than the body's own tiles")
                if not own.all():
                    # tiles of a list indexed by the iterator (checked affine by _affine_entries):
                    # their first and last uses move with the stamped iterations
                    outside = bids[moving][~own]
        self.outside_slots = outside
        self.first, self.v0, self.dv, self.name_step = first, v0, dv, step
        n = len(self.values)
        instructions = i1 - i0
        plan = []
        o = 0
        consts = first.consts
        c = 0
        # the constants of each record: the slice of `consts` its builder reads
        for node in first.nodes:
            fn = _builder(node)
            nc = fn.consts
            plan.append((fn, o, tuple(consts[c:c + nc]), node))
            o += fn.ints
            c += nc
        register = self.tracer.depth > 1           # an enclosing loop will flatten these records
        append_instruction, append_buffer = program.instructions.append, program.buffers.append
        if register or n < 12:
            # inner loops (an enclosing loop flattens their records again) and short loops, where
            # finding the unchanged parts would cost more than it saves
            known = self.tracer.known if register else None
            inst_plan, buf_plan = plan[:instructions], plan[instructions:]
            for j in range(2, n - 1):
                v = (v0 + j * dv).tolist()
                for fn, o, k, node in inst_plan:
                    r = fn(v, o, k)
                    append_instruction(r)
                    if register:
                        known[id(r)] = (node, v[o:o + fn.ints], k)
                for fn, o, k, node in buf_plan:
                    append_buffer(fn(v, o, k))
        else:
            # the outermost stamping loop: parts that do not change between iterations are shared
            # with iteration 0's records (records are never modified), only the others rebuilt,
            # and equal varying parts of its records are built once per iteration (_Template)
            records = program.instructions[i0:i1] + buffers[b0:b1]
            reduced_plan, positions, slots = _reduced_plan(plan, records, v0, dv)
            base, delta = v0[positions], dv[positions]
            inst_plan, buf_plan = reduced_plan[:instructions], reduced_plan[instructions:]
            shared = [None] * slots
            extend_instructions, extend_buffers = program.instructions.extend, program.buffers.extend
            for j in range(2, n - 1):
                v = (base + j * delta).tolist()
                extend_instructions([fn(v, o, k, shared) for fn, o, k in inst_plan])
                extend_buffers([fn(v, o, k, shared) for fn, o, k in buf_plan])
            _note_stamped_tiles(program, plan[instructions:], buffers[b0:b1], v0, dv, n)
        if outside is not None:
            self._touch_outside(outside, first.nodes[:instructions], v0, dv, i0, instructions, buffers)
        names = self.tracer.launch.names
        for key, d in step.items():
            names[key] = n2.get(key, 0) + (n - 3) * d
        self.stamped = True
        self.tracer.stamped_any = True
        self.expected_names = {key: names.get(key, 0) + d for key, d in step.items()}
        self.marks.append((len(program.instructions), len(program.buffers), None))

    def _touch_outside(self, slots, nodes, v0, dv, i0, per_iteration, buffers):
        """First and last uses of buffers outside the body that stamped records read."""
        record_of = []                          # int position -> record index in the iteration
        for r, node in enumerate(nodes):
            record_of.extend([r] * _ints(node))
        n = len(self.values)
        for p in sorted(int(p) for p in slots):
            r = record_of[p]
            for j in range(2, n - 1):
                b = buffers[int(v0[p] + j * dv[p])]
                k = i0 + j * per_iteration + r
                if b.first < 0 or b.first > k:
                    b.first = k
                if b.last < k:
                    b.last = k

    def finish(self):
        """The last iteration ran concretely: it, and iterations 0 and 1, must be as predicted."""
        self._boundary()
        self.active = False
        (i0, b0, _), (i1, b1, _), (i2, b2, _) = self.marks[:3]
        il, bl, _ = self.marks[3]
        ie, be, names = self.marks[4]
        program = self.tracer.program
        n = len(self.values)
        try:
            last = _Records(self.tracer, program.instructions[il:ie], program.buffers[bl:be])
            again0 = _Records(self.tracer, [], program.buffers[b0:b1])
            again1 = _Records(self.tracer, [], program.buffers[b1:b2])
        except _Mismatch as error:
            self._fail(str(error))
        first = self.first
        if last.nodes != first.nodes or not _same_consts(last.consts, first.consts):
            self._fail("the last iteration differs in structure or constants")
        predicted = self.v0 + (n - 1) * self.dv
        if not np.array_equal(np.array(last.ints, dtype=np.int64), predicted):
            self._fail("the last iteration is not where iterations 0 and 1 predict")
        buffer_ints = len(again0.ints)
        if buffer_ints:
            tail0 = self.v0[len(self.v0) - buffer_ints:]
            tail1 = tail0 + self.dv[len(self.dv) - buffer_ints:]
            if not (np.array_equal(np.array(again0.ints, dtype=np.int64), tail0)
                    and np.array_equal(np.array(again1.ints, dtype=np.int64), tail1)):
                self._fail("a tile of iteration 0 or 1 is used by a later iteration")
        for key, expected in self.expected_names.items():
            if names.get(key, 0) != expected:
                self._fail(f"allocation names {key!r} counted differently in the last iteration")

    def abandon(self):
        """The loop was left early (break, or an error in its body)."""
        self.active = False
        self.tracer.poisoned = True
        self.tracer.abandoned.append(self.site)


class LoopTracer:
    """Per trace: which loops stamp, the records already flattened, whether to trace again."""

    def __init__(self, recorder, launch, concrete: set):
        self.recorder, self.launch = recorder, launch
        self.program = recorder.program
        self.concrete = concrete          # loop sites to run concretely
        self.depth = 0
        self.known: dict = {}             # id(stamped record) -> (structure, ints, consts)
        self.poisoned = False
        self.stamped_any = False
        self.abandoned: list = []
        self.flushed = None               # (tile, instructions, buffers, loop) issued at a boundary
        self.running: list = []           # the stamping loops the trace is inside, outermost first
        self.off = None                   # why no further loop of this trace stamps

    def iterate(self, values: range, frame):
        """The iterator of an affine/sequential range: stamped, or plain ints when it cannot be."""
        n = len(values)
        site = (frame.f_code.co_filename, frame.f_lineno)
        if n < MIN_ITERATIONS or site in self.concrete or self.off is not None:
            return iter(values)
        return self._stamped(values, site, frame)

    def _stamped(self, values: range, site, frame):
        loop = Loop(self, site, values, frame)
        self.depth += 1
        self.running.append(loop)
        n = len(values)
        done = False
        try:
            loop.begin()
            yield loop.index(0)
            if loop.degraded is None:
                loop.after_first()
            yield loop.index(1) if loop.degraded is None else values[1]
            if loop.degraded is None:
                loop.after_second()                     # stamps 2 .. n-2, or degrades
            if loop.degraded is None:
                yield loop.index(n - 1)
                loop.finish()
            else:
                for j in range(2, n):
                    yield values[j]
            done = True
        finally:
            self.depth -= 1
            self.running.remove(loop)
            loop.frame = None
            loop.active = False
            if not done and loop.stamped:
                loop.abandon()
            if self.depth == 0:
                self.known.clear()


def run_concretely(launch, reason: str) -> None:
    """From here on the trace runs concretely: the loops it is inside run the rest of their
    iterations, and no later loop stamps. Called where stamping, or the retrace a surprise after
    stamping needs, would be unsafe: a direct allocation is placed by the kernel's own address
    arithmetic, often on state outside the kernel — AWS's allocated kernels keep their allocator's
    offset in a module global — so every iteration's body must run, and running the kernel a
    second time would not give the same addresses."""
    tracer = getattr(launch, "loop_tracer", None)
    if tracer is None:
        return
    if tracer.off is None:
        tracer.off = reason
        fallbacks.append(((), f"no loop stamps after {reason}"))
    for loop in tracer.running:
        if loop.stamped:
            loop._fail(reason)          # cannot happen in iterations 0/1; n-1 may meet it first
        loop.degrade(reason)


def iterate(values: range, frame):
    """Called by nl.affine_range / nl.sequential_range: the loop's iterator in the running trace."""
    from trnlab.nki import runtime
    launch = runtime.active()
    tracer = getattr(launch, "loop_tracer", None) if launch is not None else None
    if tracer is None:
        return iter(values)
    return tracer.iterate(values, frame)


def trace(run_once, stamping: bool = True):
    """Run `run_once(concrete_sites or None)` (None: no stamping) until it gives a program.

    `run_once` returns the program; a `Retrace` adds the loops it names to the concrete ones and
    starts again. An error raised by a trace that stamped is raised by a fully concrete trace
    instead, so that it is exactly today's error."""
    if not stamping:
        return run_once(None)[0]
    if CHECK:
        program = _trace_stamping(run_once)
        reference = run_once(None)[0]
        difference = first_difference(program, reference)
        if difference:
            raise AssertionError(f"stamped trace differs from the concrete one: {difference}")
        return program
    return _trace_stamping(run_once)


def _trace_stamping(run_once):
    concrete: set = set()
    del fallbacks[:]
    for _ in range(MAX_RETRACES):
        try:
            program, tracer = run_once(concrete)
        except Retrace as retrace:
            fallbacks.append((retrace.sites, retrace.reason))
            concrete.update(retrace.sites)
            continue
        except Exception as error:
            fallbacks.append(((), f"an error while stamping, traced again concretely: {type(error).__name__}"))
            return run_once(None)[0]
        if tracer.abandoned:
            fallbacks.append((tuple(tracer.abandoned), "a loop left early (break) or a swallowed taint"))
            concrete.update(tracer.abandoned)
            continue
        if tracer.poisoned:
            break
        return program
    fallbacks.append(((), "too many retraces: traced concretely"))
    return run_once(None)[0]


# why the last trace fell back, per retrace: (loop sites, reason) — for tests and for the curious
fallbacks: list = []


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is np.ndarray:
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) in (Access, Instruction, Buffer):
        return _same(a.__dict__, b.__dict__)
    if type(a) is float and a != a:
        return b != b
    return a == b


def first_difference(program, reference) -> str:
    """'' if two programs are the same record for record (instructions with their descriptions,
    buffers, inputs, outputs), else where they first differ."""
    for what, a, b in (("instruction", program.instructions, reference.instructions),
                       ("buffer", program.buffers, reference.buffers)):
        if len(a) != len(b):
            return f"{len(a)} {what}s vs {len(b)}"
        for k, (x, y) in enumerate(zip(a, b)):
            if not _same(x, y):
                if what == "instruction":       # with the checked descriptions, which differ too
                    x, y = f"{x} (issue {x.issue})", f"{y} (issue {y.issue})"
                return f"{what} {k}: {x} vs {y}"
    if not _same(program.inputs, reference.inputs) or not _same(program.outputs, reference.outputs):
        return "inputs or outputs"
    return ""
