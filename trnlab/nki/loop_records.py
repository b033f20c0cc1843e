"""Stamping's records: one iteration's instructions and buffers flattened into a structure, constants
and integers, and the generated builder functions that fill ``V0 + j * D`` into that structure to
append iteration j's records (the trace driver that decides when is `loops.py`).
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware.program import Access, Buffer, Instruction

# -- flattening records ------------------------------------------------------------------------
_INSTRUCTION_FIELDS = ("opcode", "engine", "operands", "attrs", "line", "region", "source", "issue")
_BUFFER_FIELDS = ("id", "name", "memory", "shape", "dtype", "partition_axis", "role", "first", "last",
                  "offset", "placement", "data", "alias_of", "shared")
_BUFFER_CONSTS = 11     # a buffer's constants: name, memory, shape, dtype, partition_axis, role, offset,
                        # placement, data, alias_of, shared (`_buffer_node`'s order)


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
        index = x.index
        if type(index) is tuple and any(type(e) is np.ndarray for e in index):
            return ("A", _node(x.buffer, ints, consts), ("t",) + tuple([_index_node(e, ints, consts) for e in index]))
        return ("A", _node(x.buffer, ints, consts), _node(index, ints, consts))
    if t is dict:
        if all(type(key) is str for key in x):
            return ("d", tuple(x)) + tuple([_node(v, ints, consts) for v in x.values()])
        consts.append(x)
        return "c"
    if t is list:
        return ("l",) + tuple([_node(e, ints, consts) for e in x])
    consts.append(x)
    return "c"


def _index_node(x, ints: list, consts: list):
    """An entry of an access's index. An integer index array (an access pattern's, `NkiTensor.ap`)
    is its first element — an integer, affine in the loop index when the pattern's offset is — and,
    as constants, its elements relative to that (kept as small as its broadcast lines) and its
    shape: `_code` rebuilds it as a broadcast view."""
    if type(x) is np.ndarray and x.dtype.kind == "i" and x.ndim and x.size:
        base = x.flat[0]
        lines = x[tuple(slice(0, 1) if st == 0 else slice(None) for st in x.strides)] if 0 in x.strides else x
        ints.append(int(base))
        relative = lines - base                 # C-contiguous: so is relative + any integer
        relative.flags.writeable = False
        consts.append(relative)
        consts.append((x.shape, tuple(0 if n == 1 and m != 1 else st for n, m, st in
                                      zip(relative.shape, x.shape, relative.strides))))
        return "a"
    return _node(x, ints, consts)


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
    consts.extend((b.offset, b.placement, b.data, b.alias_of, b.shared))
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
    if node == "a":                 # an index array: its first element + the relative elements, broadcast
        i, c = counters
        counters[0] += 1
        counters[1] += 2
        name = f"a{len(lines)}"     # (a read-only view of shape, strides k[c+1]: np.broadcast_to, faster)
        lines.append(f"{name} = k[{c}] + v[o+{i}]; {name} = _ndarray(k[{c + 1}][0], {name}.dtype, {name}, 0, "
                     f"k[{c + 1}][1]); {name}.flags.writeable = False")
        return name
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
        counters[1] = c + _BUFFER_CONSTS - 1
        return _record(lines, "_Buffer", [
            ("id", bid), ("name", name), ("memory", f"k[{c}]"), ("shape", f"k[{c + 1}]"), ("dtype", f"k[{c + 2}]"),
            ("partition_axis", f"k[{c + 3}]"), ("role", f"k[{c + 4}]"), ("first", f"v[o+{i}]"),
            ("last", f"v[o+{i + 1}]"), ("offset", f"k[{c + 5}]"), ("placement", f"k[{c + 6}]"),
            ("data", f"k[{c + 7}]"), ("alias_of", f"k[{c + 8}]"), ("shared", f"k[{c + 9}]")])
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
                 "slice": slice, "str": str, "_ndarray": np.ndarray}
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
            if n == "i" or n == "s" or n == "a":
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
        if node == "i" or node == "s" or node == "a":
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
        elif node == "s" or node == "a":
            count = 2
        elif node[0] == "d":
            count = sum(_nconsts(n) for n in node[2:])
        elif node[0] == "B":
            count = _BUFFER_CONSTS
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
        if node == "i" or node == "s" or node == "a":
            if out is not None:
                out[0].append(ip)
                if node != "i":
                    out[1].extend((f"k[{cp}]", f"k[{cp + 1}]"))
            return node
        kind = node[0]
        if kind == "B":
            if out is not None:
                out[0].extend(range(ip, ip + ni))
                out[1].extend(f"k[{cp + c}]" for c in range(_BUFFER_CONSTS))
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
