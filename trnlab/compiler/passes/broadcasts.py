"""Broadcasts: an element-wise op reads a broadcast operand as it is, without the repeated copy.

`legalise` writes PyTorch's implicit broadcasting out as `broadcast` nodes (so that `fuse` sees a bias
vector); a `broadcast` of a constant is stored repeated by `layout`. What is left is a broadcast of a
tensor computed at run time — RMSNorm's one number per row (`x * rsqrt(mean(x²))`), a per-channel
scale. The `pointwise.binary` kernel reads such an operand directly: one number per partition
([R, 1], a per-partition scalar of the Vector engine) or one row spread over the partitions ([1, C]).
This pass lets the op read the broadcast's source where the kernel's modes fit (`lower_nn.binary_views`),
and dead code removes the broadcast.
"""
from __future__ import annotations

from trnlab.compiler.ir import Graph
from trnlab.compiler.lower_nn import BINARY_KERNEL, COMMUTATIVE, binary_views

NAME = "broadcasts"


def _leading(g: Graph, node) -> bool:
    """A broadcast over leading axes only (the training lowering repeats rows for those)."""
    src = list(g.values[node.inputs[0]].shape)
    out = list(g.values[node.name].shape)
    src = [1] * (len(out) - len(src)) + src
    k = 0
    while k < len(src) and src[k] == 1:
        k += 1
    return src[k:] == out[k:]


def run(g: Graph, options=None, inner_only: bool = False) -> Graph:
    """`inner_only`: leave broadcasts over leading axes (the training lowering's `repeat_rows` reads them)."""
    producers = g.producers()
    count = 0
    for node in g.nodes:
        if node.op not in BINARY_KERNEL or len(node.inputs) != 2 or "scalar" in node.attrs:
            continue
        out = g.values[node.name].shape
        for i in (1, 0):
            p = producers.get(node.inputs[i])
            if p is None or p.op != "broadcast" or (inner_only and _leading(g, p)):
                continue
            inputs = list(node.inputs)
            inputs[i] = p.inputs[0]
            a, b = (g.values[x].shape for x in inputs)
            if binary_views(out, a, b) or (node.op in COMMUTATIVE and binary_views(out, b, a)):
                node.inputs = inputs
                count += 1
    g.remove_unused()
    g.meta.setdefault("pass_stats", {})[NAME] = {"read_in_place": count}
    return g
