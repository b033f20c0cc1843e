"""Masks whose clauses relate several iterators (``mask=(i_p >= i_f)``, ``(i_p + i_f < n)``).

A mask clause bounding one iterator restricts an instruction to a box (`indexing.restrict`); a clause
relating two iterators describes a region that is not a box (a triangle for a causal mask). NKI's
semantics is the same in both cases — the instruction acts on the elements where the predicate holds
and leaves the others alone — but AWS does not say how its compiler lowers such a mask to the
hardware's access patterns. trnlab issues the instruction once per box of a covering of the region:
it enumerates one iterator of the multi-iterator clauses (the one with the fewest values), fixes it
to each value in turn (every clause then bounds at most one iterator) and merges consecutive values
whose boxes agree (an ASSUMED lowering: a band ``i_p + i_f < n`` over [128, 512] costs one
instruction per distinct row count). Every box must obey the start-partition rule (an on-chip access
of more than 64 partitions starts at partition 0, ...): a region whose boxes would start at other
partitions — a causal ``i_p >= i_f`` — is refused with that rule named; `nisa.affine_select` is
AWS's one-instruction way to apply such a predicate.
"""
from __future__ import annotations

from trnlab.hardware.core import start_partition_ok
from trnlab.nki.errors import MaskError
from trnlab.nki.indexing import IndexExpr, Predicate, restrict

_OPS = {"<": lambda a: a < 0, "<=": lambda a: a <= 0, ">": lambda a: a > 0, ">=": lambda a: a >= 0}


def has_multi_iterator_clause(mask) -> bool:
    return isinstance(mask, Predicate) and any(len((l - r).terms) > 1 for l, _, r in mask.clauses)


def _fix(expr: IndexExpr, it, value: int) -> IndexExpr:
    coef = dict(expr.terms).get(it, 0)
    return IndexExpr(expr.const + coef * value, tuple((i, c) for i, c in expr.terms if i is not it), expr.grid)


def _single(expr: IndexExpr, op: str):
    """A clause `expr op 0` with at most one iterator: the clause, or True / False if it has none."""
    if not expr.terms:
        return _OPS[op](expr.const)
    return (expr, op, 0)


def boxes(mask: Predicate, partition_rule: bool = True) -> list[Predicate]:
    """Predicates of single-iterator clauses whose boxes cover exactly the elements where `mask`
    holds, disjoint, in the order of the enumerated iterator. With `partition_rule`, every box's
    partition range must obey the start-partition rule (else MaskError)."""
    exprs = [(l - r, op) for l, op, r in mask.clauses]
    simple = [(e, op) for e, op in exprs if len(e.terms) <= 1]
    multi = [(e, op) for e, op in exprs if len(e.terms) > 1]
    base = restrict(Predicate(tuple((e, op, 0) for e, op in simple if e.terms))) if simple else {}
    if any(not e.terms and not _OPS[op](e.const) for e, op in simple):
        return []
    candidates = {id(i): i for e, _ in multi for i, _ in e.terms}.values()

    def works(it):      # fixing `it` leaves every multi clause with at most one iterator
        return all(len([i for i, _ in e.terms if i is not it]) <= 1 for e, _ in multi)

    usable = sorted((it for it in candidates if works(it)), key=lambda it: base.get(it, (0, it.size))[1]
                    - base.get(it, (0, it.size))[0])
    if not usable:
        clause = next(f"{e!r} {op} 0" for e, op in multi if len(e.terms) > 2)
        raise MaskError(f"mask clause '{clause}' relates more than two iterators that no single fixed "
                        f"iterator separates; split it into clauses of at most two iterators")
    refused = None
    for it in usable:
        parts, bad = _boxes_fixing(it, base, simple, multi, partition_rule)
        if bad is None:
            return parts
        refused = refused or bad
    start, count = refused
    raise MaskError(
        f"mask {' & '.join(f'({e!r} {op} 0)' for e, op in multi)}: covering it with boxes would start an "
        f"instruction at partition {start} with {count} partitions, which the start-partition rule forbids "
        f"(0 for > 64 partitions, 0/64 for 33-64, 0/32/64/96 for <= 32); for a causal mask use "
        f"nisa.affine_select, which evaluates the predicate per element")


def _boxes_fixing(it, base, simple, multi, partition_rule: bool = True):
    """(boxes, None) fixing iterator `it` value by value, or (None, (start, count)) of the first box
    whose partition range breaks the start-partition rule."""
    lo, hi = base.get(it, (0, it.size))
    runs: list = []                                   # (first value, end value, clauses, box)
    for v in range(lo, hi):
        fixed = [_single(_fix(e, it, v), op) for e, op in multi]
        if any(f is False for f in fixed):
            continue
        clauses = tuple((e, op, 0) for e, op in simple if e.terms) + tuple(f for f in fixed if f is not True)
        ranges = restrict(Predicate(clauses)) if clauses else {}
        key = tuple(sorted(((id(i), r) for i, r in ranges.items() if i is not it)))
        if any(r[0] >= r[1] for _, r in key):
            continue                                   # no element left for this value
        if runs and runs[-1][1] == v and runs[-1][3] == key:
            runs[-1] = (runs[-1][0], v + 1, runs[-1][2], key)
        else:
            runs.append((v, v + 1, clauses, key))
    single = IndexExpr(0, ((it, 1),))
    for first, end, clauses, key in runs:
        ranges = dict(restrict(Predicate(clauses + ((single, ">=", first), (single, "<", end)))))
        for i, (a, b) in ranges.items():
            if partition_rule and i.axis == 0 and a and not start_partition_ok(a, b - a):
                return None, (a, b - a)
    return [Predicate(clauses + ((single, ">=", first), (single, "<", end))) for first, end, clauses, _ in runs], None


def call_split(impl, bound: dict, name: str = "the instruction"):
    """Run instruction `impl` (bound keyword arguments, destination style) once per box of its
    mask's region. Functional style is refused: the boxes must all write one destination, which a
    functional call only learns later (where its result is assigned)."""
    if bound.get("dst") is None:
        raise MaskError(f"nisa.{name}: a mask relating several iterators is supported in destination style "
                        f"only (nisa.{name}(dst=tile[...], ..., mask=...)); the functional form and nl.* "
                        f"math with such a mask are not simulated")
    parts = boxes(bound["mask"])
    if not parts:
        return impl(**{**bound, "mask": False})
    for box in parts:
        impl(**{**bound, "mask": box})
    return None
