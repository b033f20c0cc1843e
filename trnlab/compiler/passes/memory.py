"""Memory planning for the whole graph: weights resident in HBM, activations placed by liveness.

- weights and constants: loaded once when the artifact is loaded, resident in HBM for every run;
- activations: each gets an offset in one HBM activation arena, chosen first-fit among the tensors
  whose live ranges (first write .. last read, in the schedule's order) overlap with its own, so a
  tensor reuses the bytes of one that is dead (AWS's compiler allocates by liveness too). A view
  (`reshape`) is the same bytes as its source and extends the source's live range;
- SBUF candidates: an activation that is written by one kernel and read only by the next, and that fits
  in the SBUF space left per kernel, could stay on chip between the two instead of a round trip
  through HBM. Where a kernel exists that takes the producer's tiles on chip (`lower.sbuf_chain`:
  layer_norm -> [convert] -> linear, lowered to `fused.layer_norm_linear`), the plan puts the tensor
  at level "sbuf" (no HBM bytes, no arena slot) and the lowering honours it; the other candidates stay
  in HBM and the runtime's advice reports their round trips. `compile(keep_in_sbuf=False)` keeps
  every activation in HBM (to compare).

Result in `graph.meta["memory"]`: the tensor table (value -> level, offset, bytes, live range), the
resident weight bytes, the arena's size and the sum it would be without reuse.
"""
from __future__ import annotations

from trnlab.compiler.ir import Graph
from trnlab.compiler.ops import VIEW_OPS

NAME = "memory"
ALIGN = 64                                  # bytes; assumed alignment of HBM allocations
SBUF_SHARE = 0.5                            # assumed: half of SBUF free for a tensor kept between kernels


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def run(g: Graph, options=None) -> Graph:
    from trnlab.hardware import presets
    target = getattr(options, "target", "trn2") or "trn2"
    spec = presets.core_spec(target)
    sbuf_bytes = spec.sbuf_bytes
    base = {}                                # view -> the value whose bytes it is
    for n in g.nodes:
        if n.op in VIEW_OPS:
            base[n.name] = base.get(n.inputs[0], n.inputs[0])
    first, last = {}, {}
    for i, name in enumerate(g.inputs):
        first[name] = -1
    for i, n in enumerate(g.nodes):
        first.setdefault(base.get(n.name, n.name), i)
        for x in n.inputs:
            b = base.get(x, x)
            last[b] = max(last.get(b, -1), i)
    for o in g.outputs:
        b = base.get(o, o)
        last[b] = len(g.nodes)               # outputs live to the end (they are copied out)
    table = {}
    resident = 0
    for name in g.constants:
        v = g.values[name]
        table[name] = {"level": "hbm (resident)", "offset": resident, "bytes": v.nbytes, "kind": v.kind}
        resident += _aligned(v.nbytes)
    placed: list[tuple] = []                 # (offset, end, first, last)
    arena = 0
    no_reuse = 0
    readers = g.users()
    order = {n.name: i for i, n in enumerate(g.nodes)}

    def candidate(name: str) -> bool:
        users = [order[r.name] for r in readers.get(name, [])]
        return (name not in g.inputs and name not in g.outputs and len(users) == 1 and
                users[0] == order.get(name, -2) + 1 and g.values[name].nbytes <= SBUF_SHARE * sbuf_bytes)

    on_chip = set()
    if getattr(options, "keep_in_sbuf", True):
        from trnlab.compiler.lower import on_chip_values, sbuf_chain
        for n in g.nodes:
            chain = sbuf_chain(g, n, readers)
            kept = on_chip_values(g, chain) if chain else []
            if kept and all(candidate(v) for v in kept):
                on_chip.update(kept)
    for name in list(g.inputs) + [n.name for n in g.nodes if n.name not in base]:
        v = g.values[name]
        if name in on_chip:
            table[name] = {"level": "sbuf", "bytes": v.nbytes, "live": [order[name], order[name] + 1],
                           "kind": v.kind, "sbuf_candidate": True}
            continue
        size = _aligned(v.nbytes)
        lo, hi = first.get(name, -1), last.get(name, first.get(name, -1))
        offset = 0
        for o0, o1, f, l in sorted(placed):
            if f <= hi and lo <= l and offset < o1 and o0 < offset + size:
                offset = o1                  # overlaps in time and space: move past it
        placed.append((offset, offset + size, lo, hi))
        arena = max(arena, offset + size)
        no_reuse += size
        sbuf_ok = candidate(name)
        table[name] = {"level": "hbm", "offset": offset, "bytes": v.nbytes, "live": [lo, hi],
                       "kind": v.kind, "sbuf_candidate": bool(sbuf_ok)}
    for view, b in base.items():
        table[view] = {"level": "view", "of": b, "bytes": g.values[view].nbytes}
    g.meta["memory"] = {"tensors": table, "resident_bytes": resident, "arena_bytes": arena,
                        "without_reuse_bytes": no_reuse, "target": target}
    return g


def summary(g: Graph) -> str:
    m = g.meta.get("memory")
    if not m:
        return "no memory plan (run the memory pass)"
    acts = [t for t in m["tensors"].values() if t["level"] == "hbm"]
    kept = [t for t in m["tensors"].values() if t["level"] == "sbuf"]
    return (f"weights resident in HBM: {m['resident_bytes'] / 1024:.1f} KiB; activation arena "
            f"{m['arena_bytes'] / 1024:.1f} KiB for {len(acts)} tensors ({m['without_reuse_bytes'] / 1024:.1f} KiB "
            f"without reuse by liveness); {len(kept)} kept in SBUF between fused kernels "
            f"({sum(t['bytes'] for t in kept) / 1024:.1f} KiB that never go to HBM); "
            f"{sum(t.get('sbuf_candidate', False) for t in acts)} more could stay in SBUF (no kernel takes them on chip)")
