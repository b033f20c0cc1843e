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
of more than 64 partitions starts at partition 0, ...); where no covering does — a causal
``i_p >= i_f`` — the instruction runs over the bounding box into a scratch tile and a select keeps
its results where the predicate holds and dst's values elsewhere (three more instructions, also an
ASSUMED lowering; `nisa.affine_select` is AWS's one-instruction way to apply such a predicate).
"""
from __future__ import annotations

import numpy as np

from trnlab.hardware.core import start_partition_ok
from trnlab.nki.errors import MaskError
from trnlab.nki.indexing import IndexExpr, Predicate, restrict

class PartitionStartRefused(MaskError):
    """No covering by boxes obeys the start-partition rule (call_split then selects instead)."""


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
    raise PartitionStartRefused(
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
    """Run instruction `impl` (bound keyword arguments, destination style) on exactly the elements
    where its mask holds: once per box of the region, or — when boxes would break the
    start-partition rule (a causal mask) — once over the bounding box into a scratch tile, then a
    select of the scratch where the predicate holds and of dst elsewhere. In functional style the
    boxes write a result tile made at once (elements outside the predicate are never written);
    the select fallback needs destination style."""
    functional = bound.get("dst") is None
    try:
        parts = boxes(bound["mask"])
    except PartitionStartRefused as refused:
        if functional:
            raise MaskError(f"{refused} (nisa.{name} in functional style: write it in destination style, "
                            f"nisa.{name}(dst=tile[...], ..., mask=...), to get the select fallback)") from None
        return _compute_then_select(impl, bound, name, refused)
    if functional:
        # a pending result whose instruction is the whole set of boxes: where the program assigns
        # it (``t[i_p, i_f] = nl.exp(t, mask=...)``) the boxes write that destination directly, so
        # elements outside the predicate keep their values; else a fresh tile. The first box's call
        # (withdrawn before it is issued) tells the result's shape, dtype and memory.
        from trnlab.nki import issue, launches
        probe = impl(**{**bound, "mask": parts[0] if parts else False})
        launch = launches.current()
        if probe is None:
            return None
        if launch.pending is probe:
            launch.pending = None

        def emit(out, _accumulate):
            for box in parts:
                impl(**{**bound, "dst": out, "mask": box})

        return issue.produce(tuple(probe.shape), probe.dtype, probe.buffer, emit)
    if not parts:
        return impl(**{**bound, "mask": False})
    for box in parts:
        impl(**{**bound, "mask": box})
    return None


def _compute_then_select(impl, bound: dict, name: str, refused: MaskError):
    """impl over the bounding box of the single-iterator clauses into a scratch SBUF tile, then
    dst = predicate ? scratch : dst (a GpSimd affine_select builds the 0/1 predicate tile from a
    memset of ones, a Vector select merges): three more instructions, exact values (selects copy).
    Elements of dst outside the predicate are read to be kept, so they must have been written."""
    from trnlab.hardware import dtypes as hw_dtypes
    from trnlab.nki import issue, language
    from trnlab.nki.indexing import expr_iterators
    mask, dst = bound["mask"], bound["dst"]
    if dst.buffer != "sbuf":
        raise MaskError(f"{refused} (nisa.{name} into {dst.buffer.upper()}: the select fallback needs an SBUF dst)")
    simple = tuple(c for c in mask.clauses if len((c[0] - c[2]).terms) <= 1)
    box_mask = Predicate(simple) if simple else None
    ranges = restrict(box_mask)
    scratch = language.ndarray(tuple(dst.shape), dst.dtype, buffer=language.sbuf, name="mask_scratch")
    impl(**{**bound, "dst": scratch, "mask": box_mask})
    launch = issue.begin()
    core = launch.core
    on_true, target = scratch.hw_view(ranges), dst.hw_view(ranges)
    exprs = [c[0] - c[2] for c in mask.clauses]
    iterators = expr_iterators(tuple(exprs))
    holds = np.ones([hi - lo for lo, hi in (ranges.get(it, (0, it.size)) for it in iterators)], dtype=bool)
    for e, (_, op, _) in zip(exprs, mask.clauses):
        holds &= _OPS[op](e.values(iterators, ranges))
    if holds.size != int(np.prod(on_true.shape)):
        raise MaskError(f"{refused} (and its predicate over {holds.shape} does not match the tile {on_true.shape})")
    shape = tuple(on_true.shape)
    ones = core.sbuf.allocate(shape, hw_dtypes.float32, name=launch.fresh_name("mask_ones"))
    predicate = core.sbuf.allocate(shape, hw_dtypes.float32, name=launch.fresh_name("mask_pred"))
    core.memset(dst=ones.full, value=1.0)
    core.affine_select(dst=predicate.full, predicate=holds.reshape(shape), on_true=ones.full, on_false_value=0.0)
    core.select(dst=target, predicate=predicate.full, on_true=on_true, on_false=target)
    core.sbuf.free(ones)
    core.sbuf.free(predicate)
    return None
