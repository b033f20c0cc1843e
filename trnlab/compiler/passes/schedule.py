"""Scheduling: the order the ops run in (the order the lowering traces them into the one program).

A topological order chosen greedily: among the ops whose inputs are all ready, take the one that
reads the value produced most recently (ties: the graph's order). A consumer then runs right after
its producer whenever the dependencies allow, which shortens live ranges (a smaller activation arena)
and makes more producer -> consumer pairs adjacent, the pairs the memory pass can keep in SBUF. The
device overlaps neighbouring ops by itself (the engines run ahead across region boundaries), so the
order matters for memory, not for dependencies.

`graph.meta["schedule"]` is the order (node names); `pass_stats["schedule"]` says how many ops moved.
"""
from __future__ import annotations

from trnlab.compiler.ir import Graph

NAME = "schedule"


def order(g: Graph) -> list:
    """The nodes in the scheduled order (see the module docstring)."""
    position = {n.name: i for i, n in enumerate(g.nodes)}
    produced_at = {name: -1 for name in list(g.inputs) + list(g.constants)}
    pending = list(g.nodes)
    out = []
    while pending:
        ready = [n for n in pending if all(i in produced_at for i in n.inputs)]
        if not ready:
            raise ValueError(f"schedule: the graph has a cycle or an undefined input among {[n.name for n in pending][:5]}")
        best = max(ready, key=lambda n: (max((produced_at[i] for i in n.inputs), default=-1), -position[n.name]))
        produced_at[best.name] = len(out)
        out.append(best)
        pending.remove(best)
    return out


def run(g: Graph, options=None) -> Graph:
    before = [n.name for n in g.nodes]
    g.nodes = order(g)
    after = [n.name for n in g.nodes]
    g.meta["schedule"] = after
    g.meta.setdefault("pass_stats", {})[NAME] = {"ops": len(after), "moved": sum(a != b for a, b in zip(before, after))}
    return g


def listing(g: Graph) -> str:
    """The schedule, one op per line."""
    return "\n".join(f"  {i:3d} %{n.name:22s} {n.op}" for i, n in enumerate(g.nodes))
