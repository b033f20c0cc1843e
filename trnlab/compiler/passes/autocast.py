"""Auto-cast: which ops compute in a lower precision, as neuronx-cc's `--auto-cast` decides.

Modes (the names of neuronx-cc's flags [frameworks/torch/pytorch-native-overview; neuronx-cc
reference], `--auto-cast-type` bf16 by default here):

- "none": every op keeps its dtype (fp32 in, fp32 out; the Tensor engine runs fp32 at 1/4 rate);
- "matmult": the inputs of matrix multiplications (linear, matmul, batch_matmul, attention) are cast
  to bf16, accumulation stays fp32 in PSUM; their outputs are bf16;
- "all": every floating-point op computes in bf16 — except softmax and the norms, which are kept in
  fp32 (their sums and exponentials are where bf16 loses the most), as neuronx-cc keeps them.

Weights are cast once at compile time (a new bf16 constant, half the HBM bytes); activations get a
`convert` op, which the lowering runs as a cast kernel. Elementwise ops follow their inputs: an add
of fp32 and bf16 is fp32 (PyTorch's promotion). Graph outputs are converted back to the dtype the
user's model returns. The pass runs after `fuse` so that a fused attention is one matmul-class op (its
softmax is fp32 inside the kernel in every mode).
"""
from __future__ import annotations

import numpy as np

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.ops import to_numpy, to_torch, torch_dtype

NAME = "autocast"
MODES = ("none", "matmult", "all")
TYPES = ("bf16", "fp16")
MATMUL_OPS = ("linear", "matmul", "batch_matmul", "attention")
FP32_OPS = ("softmax", "layer_norm", "rms_norm")
FLOATS = ("float32", "bfloat16", "float16")
NAMES = {"bf16": "bfloat16", "fp16": "float16"}


def _cast_input(g: Graph, node: Node, index: int, dtype: str, cache: dict) -> None:
    name = node.inputs[index]
    v = g.values[name]
    if v.dtype not in FLOATS or v.dtype == dtype:
        return
    key = (name, dtype)
    if key not in cache:
        if v.kind in ("param", "const"):              # a weight: cast now, once
            value = to_numpy(to_torch(g.constants[name]).to(torch_dtype(dtype)))
            cache[key] = g.add_constant(g.fresh(f"{name}_{dtype[:4]}"), np.asarray(value), v.kind).name
        else:
            cache[key] = g.add_node("convert", [name], v.shape, dtype, {"dtype": dtype}, node.source,
                                    name=f"{name}_{dtype[:4]}", before=node).name
    node.inputs[index] = cache[key]


def _promote(dtypes: list) -> str:
    floats = [d for d in dtypes if d in FLOATS]
    if "float32" in floats:
        return "float32"
    return floats[0] if floats else dtypes[0]


def run(g: Graph, options=None) -> Graph:
    mode = getattr(options, "autocast", "none") or "none"
    low = NAMES.get(getattr(options, "autocast_type", "bf16"), "bfloat16")
    if mode not in MODES:
        raise ValueError(f"autocast {mode!r}: neuronx-cc's --auto-cast takes one of {MODES}")
    if mode == "none":
        return g
    original = {o: g.values[o].dtype for o in g.outputs}
    cache: dict = {}
    for node in list(g.nodes):
        if node.op == "convert":
            continue
        out = g.values[node.name]
        if node.op in MATMUL_OPS:
            n_cast = 2 if node.op != "attention" else 1               # x and w (the bias stays fp32)
            for i in range(min(n_cast, len(node.inputs))):
                _cast_input(g, node, i, low, cache)
            out.dtype = low if out.dtype in FLOATS else out.dtype
            if node.op == "linear" and node.attrs.get("residual"):
                out.dtype = g.values[node.inputs[-1]].dtype      # the residual stream keeps its precision
        elif node.op in FP32_OPS:
            for i in range(len(node.inputs)):
                _cast_input(g, node, i, "float32", cache)
            out.dtype = "float32"
        elif out.dtype in FLOATS:
            if mode == "all":
                for i in range(len(node.inputs)):
                    _cast_input(g, node, i, low, cache)
            ins = [g.values[i].dtype for i in node.inputs if g.values[i].dtype in FLOATS]
            if node.op == "embedding":
                ins = [g.values[node.inputs[0]].dtype]
            out.dtype = _promote(ins) if ins else out.dtype
    for o in list(g.outputs):
        if g.values[o].dtype != original[o]:
            back = g.add_node("convert", [o], g.values[o].shape, original[o], {"dtype": original[o]},
                              g.node(o).source if g.node(o) else "", name=f"{o}_out")
            g.outputs = [back.name if x == o else x for x in g.outputs]
    g.remove_unused()
    return g
