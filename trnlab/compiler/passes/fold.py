"""Fold: dead code, identities and constant folding.

- identities: `copy` (ATen's clone/alias), a `reshape` or `broadcast` to the same shape, chains of reshapes (one is
  enough), a `transpose` with the identity permutation, a `convert` to the dtype it already has;
- constant folding: an op whose inputs are all known at compile time is computed now (PyTorch, on the
  host) and becomes a constant: the causal mask's `logical_not`, the position ids' embedding rows
  (`wpe(arange(T))`: weights are constants at inference, as when Neuron traces a model). Two kinds are
  left for `layout` to decide: a `broadcast` (folding it would store the repeated copy) and a
  `transpose`/`convert` of a weight (that is the weight's layout, chosen after fusion);
- dead code: nodes nobody reads, constants nobody reads.
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph
from trnlab.compiler.ops import evaluate, to_numpy, to_torch

NAME = "fold"
KEEP = ("broadcast",)                       # never folded here (layout materialises them if it must)
WEIGHT_LAYOUT_OPS = ("transpose", "convert")
MAX_FOLDED_BYTES = 64 * 1024 * 1024         # assumed: a folded constant larger than this stays an op


def _remove_identities(g: Graph) -> int:
    producers = g.producers()
    removed = 0
    for node in list(g.nodes):
        v = g.values[node.name]
        x = node.inputs[0] if node.inputs else None
        same = False
        if node.op == "copy":
            same = True
        elif node.op == "reshape":
            same = tuple(g.values[x].shape) == tuple(v.shape)
            parent = producers.get(x)
            if not same and parent is not None and parent.op == "reshape":
                node.inputs = [parent.inputs[0]]            # reshape(reshape(a)) -> reshape(a)
                same = tuple(g.values[parent.inputs[0]].shape) == tuple(v.shape)
                x = node.inputs[0]
        elif node.op == "transpose":
            same = list(node.attrs["perm"]) == list(range(len(v.shape)))
        elif node.op == "broadcast":
            same = tuple(g.values[x].shape) == tuple(v.shape)
        elif node.op == "convert":
            same = g.values[x].dtype == v.dtype
        if same:
            g.replace_uses(node.name, x)
            g.nodes.remove(node)
            del g.values[node.name]
            producers.pop(node.name, None)
            removed += 1
    return removed


def _fold_constants(g: Graph) -> int:
    folded = 0
    for node in list(g.nodes):
        if not node.inputs or node.op in KEEP or node.op.startswith("aten.") and "item" in node.attrs:
            continue
        kinds = [g.values[i].kind for i in node.inputs]
        if not all(k in ("param", "const") for k in kinds):
            continue
        if node.op in WEIGHT_LAYOUT_OPS and "param" in kinds:
            continue
        if g.values[node.name].nbytes > MAX_FOLDED_BYTES:
            continue
        value = evaluate(node.op, node.attrs, [to_torch(g.constants[i]) for i in node.inputs])
        g.nodes.remove(node)
        del g.values[node.name]
        g.add_constant(node.name, np.asarray(to_numpy(value)), "const")
        folded += 1
    return folded


def run(g: Graph, options=None) -> Graph:
    stats = {"identities": 0, "folded": 0, "dead": 0}
    while True:
        i, f = _remove_identities(g), _fold_constants(g)
        d = len(g.remove_unused())
        stats["identities"] += i
        stats["folded"] += f
        stats["dead"] += d
        if not (i or f or d):
            break
    g.meta.setdefault("pass_stats", {})[NAME] = stats
    return g
