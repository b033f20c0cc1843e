"""Layout: put constants in the layout the kernels read, once, at compile time.

- weights: a `linear` whose weight arrives as nn.Linear's [out, in] (weight_layout="out_in") would
  transpose every weight tile on the Tensor engine at every call (`nc_transpose`: PE time that does no
  model math). The Tensor engine contracts over the partition axis, so the kernel wants the weight as
  [in = K on the partitions, out]: this pass stores W.T as a new constant and switches the op to
  "in_out". A weight shared with another op (GPT's lm_head and token table) gets its own transposed
  copy: V*C more bytes of HBM, in exchange for no transposes per call;
- broadcast constants: `broadcast(c)` of a constant (the position embedding rows, the same for every
  sequence of the batch) is stored repeated, so that the `add` kernel reads two arrays of one shape;
- int64 constants (position ids) become int32: the Neuron compiler narrows int64 to int32, and our
  kernels take int32 ids.
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph

NAME = "layout"


def run(g: Graph, options=None) -> Graph:
    stats = {"weights_transposed": 0, "broadcasts_materialised": 0, "int64_narrowed": 0}
    transposed: dict[str, str] = {}
    for node in list(g.nodes):
        if node.op == "linear" and node.attrs.get("weight_layout") == "out_in":
            w = node.inputs[1]
            if g.values[w].kind not in ("param", "const"):
                continue
            if w not in transposed:
                array = np.ascontiguousarray(g.constants[w].T)
                transposed[w] = g.add_constant(g.fresh(f"{w}_T"), array, g.values[w].kind).name
                stats["weights_transposed"] += 1
            node.inputs[1] = transposed[w]
            node.attrs["weight_layout"] = "in_out"
        elif node.op == "broadcast" and g.values[node.inputs[0]].kind == "const":
            array = np.ascontiguousarray(np.broadcast_to(g.constants[node.inputs[0]], node.attrs["shape"]))
            g.nodes.remove(node)
            del g.values[node.name]
            g.add_constant(node.name, array, "const")
            stats["broadcasts_materialised"] += 1
    for name in list(g.constants):
        if g.constants[name].dtype == np.int64:
            g.constants[name] = g.constants[name].astype(np.int32)
            g.values[name].dtype = "int32"
            stats["int64_narrowed"] += 1
    g.remove_unused()
    g.meta.setdefault("pass_stats", {})[NAME] = stats
    return g
