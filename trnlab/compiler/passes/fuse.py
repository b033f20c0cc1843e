"""Fuse: groups of ops that one kernel computes become one op.

Rules (each a function `rule(graph) -> number of rewrites`, tried in order until none applies):

- `fuse_attention`: the explicit attention of a GPT — q, k, v sliced from one qkv tensor, reshaped to
  heads, `q @ kᵀ`, a scale, a causal `where(mask, -inf)`, `softmax`, `@ v`, heads back side by side —
  becomes `attention(qkv, n_head)`, FlashAttention-style in one kernel: the [T, T] scores never leave
  the chip. The rule finds the pattern by its structure (softmax between two batch matmuls whose
  operands are views of slices of one tensor) and then *confirms* it: the matched subgraph and the
  fused op are evaluated on the same random qkv and must agree (a match that computes something else,
  e.g. a non-causal mask, is left alone);
- `fuse_linear`: `matmul(x, w)`, then an optional `add` of a broadcast bias vector, then an optional
  activation (relu, gelu, tanh, sigmoid, silu; reshapes in between are free) -> `linear(x, w, bias,
  activation)`: the bias and the activation ride on the PSUM evacuation. A weight given as
  `transpose(W)` (nn.Linear's [out, in]) is read as W with weight_layout="out_in";
- layer norms need no rule: core ATen keeps `native_layer_norm` whole and `legalise` maps it to one op.

- `fuse_residual`: `add(linear(...), r)` (reshapes in between are free; r of the add's own shape, not a
  broadcast) -> the linear with a residual input: a transformer's `x + proj(y)` is added on the PSUM
  evacuation instead of in an `add` kernel that reads both tensors back from HBM.

- `fuse_rms_norm`: x * rsqrt(mean(x², -1) + eps) [* w] (a Llama port's RMSNorm, `nn.RMSNorm` after
  decomposition) -> `rms_norm(x, w, eps)`, one kernel.

`compile(..., fusions=[...])` replaces this list, e.g. with a rule of your own (notebook 06).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from trnlab.compiler.ir import Graph, Node
from trnlab.compiler.ops import ACTIVATIONS, evaluate, to_torch

NAME = "fuse"
WALK_THROUGH = ("reshape", "transpose", "broadcast", "copy", "convert")


def single_user(g: Graph, value: str, users: dict) -> Node | None:
    """The one node that reads `value`, or None (several readers, or a graph output)."""
    readers = users.get(value, [])
    if len(readers) != 1 or value in g.outputs:
        return None
    return readers[0]


def back_through_views(g: Graph, value: str, producers: dict) -> str:
    """Follow reshape/transpose/broadcast/copy/convert back to the value they are a view of."""
    node = producers.get(value)
    while node is not None and node.op in WALK_THROUGH:
        value = node.inputs[0]
        node = producers.get(value)
    return value


def _forward_views(g: Graph, value: str, users: dict) -> list[str]:
    """`value` and the chain of single-reader views after it."""
    chain = [value]
    while True:
        nxt = single_user(g, chain[-1], users)
        if nxt is None or nxt.op not in WALK_THROUGH:
            return chain
        chain.append(nxt.name)


def _subgraph(g: Graph, start: str, end: str) -> list[Node]:
    """The nodes on paths from `start` to `end`, in order (their other inputs are constants)."""
    producers = g.producers()
    needed, stack = set(), [end]
    while stack:
        v = stack.pop()
        if v in needed or v == start or v not in producers:
            continue
        needed.add(v)
        stack.extend(producers[v].inputs)
    return [n for n in g.nodes if n.name in needed]


def _evaluate_subgraph(g: Graph, nodes: list[Node], start: str, x: torch.Tensor, end: str) -> torch.Tensor | None:
    env = {start: x}
    for n in nodes:
        ins = []
        for i in n.inputs:
            if i in env:
                ins.append(env[i])
            elif i in g.constants:
                ins.append(to_torch(g.constants[i]))
            else:
                return None                          # depends on something else than start: not a match
        env[n.name] = evaluate(n.op, n.attrs, ins)
    return env.get(end)


def fuse_attention(g: Graph) -> int:
    producers, users = g.producers(), g.users()
    for sm in list(g.nodes):
        if sm.op != "softmax":
            continue
        # scores side: softmax <- [where <- mul] <- (views) <- batch_matmul(q, kT)
        v = sm.inputs[0]
        for _ in range(8):                           # step back over where / mul / views to the matmul
            p = producers.get(v)
            if p is None or p.op in ("batch_matmul", "matmul"):
                break
            live = [i for i in p.inputs if g.values[i].kind == "node"]
            if len(live) != 1:
                break
            v = live[0]
        scores_mm = producers.get(v)
        if scores_mm is None or scores_mm.op != "batch_matmul":
            continue
        # output side: softmax -> views -> batch_matmul(p, v) -> views -> [B, T, C]
        chain = _forward_views(g, sm.name, users)
        out_mm = single_user(g, chain[-1], users)
        if out_mm is None or out_mm.op != "batch_matmul" or out_mm.inputs[0] != chain[-1]:
            continue
        parts = [producers.get(back_through_views(g, i, producers)) for i in
                 (scores_mm.inputs[0], scores_mm.inputs[1], out_mm.inputs[1])]
        if any(p is None or p.op != "slice" for p in parts) or len({p.inputs[0] for p in parts}) != 1:
            continue
        qkv = parts[0].inputs[0]
        B, T, C3 = (g.values[qkv].shape + (0, 0, 0))[:3]
        if len(g.values[qkv].shape) != 3:
            continue
        C = C3 // 3
        out_chain = _forward_views(g, out_mm.name, users)
        ends = [name for name in out_chain if tuple(g.values[name].shape) in ((B, T, C), (B * T, C))]
        if not ends:
            continue
        end = ends[0]
        end_shape = tuple(g.values[end].shape)
        heads = g.values[scores_mm.name].shape[0] // B
        if heads < 1 or C % heads:
            continue
        # confirm: the matched ops compute causal attention with this many heads
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(g.values[qkv].shape, generator=gen).to(getattr(torch, g.values[qkv].dtype))
        matched = _evaluate_subgraph(g, _subgraph(g, qkv, end), qkv, x, end)
        fused = evaluate("attention", {"n_head": heads}, [x]).reshape(end_shape)
        if matched is None or not torch.allclose(matched.float(), fused.float(), rtol=1e-3, atol=1e-4):
            continue
        node = g.add_node("attention", [qkv], (B, T, C), g.values[end].dtype,
                          {"n_head": heads, "scale": 1.0 / math.sqrt(C // heads)}, sm.source,
                          name="attention", before=g.node(end))
        out = node.name
        if end_shape != (B, T, C):
            out = g.add_node("reshape", [node.name], end_shape, g.values[end].dtype, {"shape": list(end_shape)},
                             sm.source, before=g.node(end)).name
        g.replace_uses(end, out)
        g.remove_unused()
        return 1
    return 0


def fuse_linear(g: Graph) -> int:
    producers, users = g.producers(), g.users()
    for mm in list(g.nodes):
        if mm.op != "matmul" or len(g.values[mm.inputs[0]].shape) != 2:
            continue
        x, w = mm.inputs
        layout = "in_out"
        wp = producers.get(w)
        if wp is not None and wp.op == "transpose" and list(wp.attrs["perm"]) == [1, 0]:
            w, layout = wp.inputs[0], "out_in"
        inputs = [x, w]
        last, activation = mm.name, None
        nxt = single_user(g, last, users)
        if nxt is not None and nxt.op == "add" and len(nxt.inputs) == 2:
            other = nxt.inputs[1] if nxt.inputs[0] == last else nxt.inputs[0]
            bias = back_through_views(g, other, producers)
            N = g.values[mm.name].shape[-1]
            if tuple(g.values[bias].shape) in ((N,), (1, N)):
                inputs.append(bias)
                last = nxt.name
        views = _forward_views(g, last, users)
        act = single_user(g, views[-1], users)
        if act is not None and (act.op in ACTIVATIONS or act.op == "gelu"):
            name = act.op
            if act.op == "gelu" and act.attrs.get("approximate", "none") == "tanh":
                name = "gelu_tanh"
            activation, last = name, act.name
        M, N = g.values[mm.name].shape
        node = g.add_node("linear", inputs, (M, N), g.values[mm.name].dtype,
                          {"activation": activation, "weight_layout": layout}, mm.source, name="linear",
                          before=mm)
        if last == mm.name:
            g.replace_uses(mm.name, node.name)
        else:
            out = node.name
            if tuple(g.values[last].shape) != (M, N):
                out = g.add_node("reshape", [node.name], g.values[last].shape, g.values[last].dtype,
                                 {"shape": list(g.values[last].shape)}, mm.source, before=mm).name
            g.replace_uses(last, out)
        g.remove_unused()
        return 1
    return 0


def fuse_residual(g: Graph) -> int:
    producers, users = g.producers(), g.users()
    for add in list(g.nodes):
        if add.op != "add" or len(add.inputs) != 2 or "scalar" in add.attrs:
            continue
        for side in (0, 1):
            a, r = add.inputs[side], add.inputs[1 - side]
            lin = producers.get(back_through_views(g, a, producers))
            if lin is None or lin.op != "linear" or lin.attrs.get("residual") or single_user(g, lin.name, users) is None:
                continue                             # (a linear read elsewhere too would be computed twice)
            chain = _forward_views(g, lin.name, users)
            if a not in chain or chain.index(a) != len(chain) - 1 or any(
                    producers[v].op not in ("reshape", "copy") for v in chain[1:]):
                continue                             # only free views between the linear and the add
            out, res = g.values[add.name], g.values[r]
            M, N = g.values[lin.name].shape
            if tuple(res.shape) != tuple(out.shape) or res.kind != "node":
                continue
            r2 = r
            if tuple(res.shape) != (M, N):
                r2 = g.add_node("reshape", [r], (M, N), res.dtype, {"shape": [M, N]}, add.source,
                                before=add).name
            attrs = dict(lin.attrs, residual=True)
            node = g.add_node("linear", list(lin.inputs) + [r2], (M, N), out.dtype, attrs, lin.source,
                              name="linear", before=add)
            result = node.name
            if tuple(out.shape) != (M, N):
                result = g.add_node("reshape", [node.name], out.shape, out.dtype, {"shape": list(out.shape)},
                                    add.source, before=add).name
            g.replace_uses(add.name, result)
            g.remove_unused()
            return 1
    return 0


def fuse_rms_norm(g: Graph) -> int:
    """RMSNorm written out — x * rsqrt(mean(x ** 2, -1, keepdim) + eps) [* w], as Llama ports write it and
    as `nn.RMSNorm` decomposes — -> `rms_norm(x, w, eps)`: one kernel instead of six element-wise passes."""
    producers, users = g.producers(), g.users()
    for mean in g.nodes:
        if mean.op != "mean" or not mean.attrs.get("keepdim"):
            continue
        p = producers.get(mean.inputs[0])
        x = p.inputs[0] if p is not None and p.op == "pow" and p.attrs.get("scalar") == 2.0 else None
        rank = len(g.values[mean.inputs[0]].shape)
        if x is None or mean.attrs["dims"] != [rank - 1] or single_user(g, p.name, users) is not mean:
            continue
        chain, ok = [mean], True
        for op in ("add", "rsqrt", "broadcast", "mul"):
            nxt = single_user(g, chain[-1].name, users)
            if op == "broadcast" and nxt is not None and nxt.op == "mul":
                chain.append(nxt)                         # read in place (no broadcast node)
                break
            if nxt is None or nxt.op != op or (op == "add" and "scalar" not in nxt.attrs):
                ok = False
                break
            chain.append(nxt)
        if not ok or chain[-1].op != "mul" or set(chain[-1].inputs) != {x, chain[-2].name}:
            continue
        eps, out = chain[1].attrs["scalar"], chain[-1]
        C = g.values[x].shape[-1]
        scaled = single_user(g, out.name, users)
        weight = None
        if scaled is not None and scaled.op == "mul":
            other = [i for i in scaled.inputs if i != out.name]
            w = producers.get(other[0]) if len(other) == 1 else None
            src = w.inputs[0] if w is not None and w.op == "broadcast" else (other[0] if other else None)
            if src is not None and tuple(g.values[src].shape) == (C,):
                weight, out = src, scaled
        if weight is None:
            weight = g.add_constant(g.fresh(f"{mean.name}_ones"), np.ones(C, np.float32)).name
        out.op, out.inputs, out.attrs = "rms_norm", [x, weight], {"eps": float(eps)}
        g.remove_unused()
        return 1
    return 0


FUSIONS = [fuse_attention, fuse_linear, fuse_residual, fuse_rms_norm]


def run(g: Graph, options=None) -> Graph:
    rules = getattr(options, "fusions", None)
    rules = FUSIONS if rules is None else rules
    counts = {}
    for rule in rules:
        n = 0
        while True:
            done = rule(g)
            if not done:
                break
            n += int(done)
        counts[getattr(rule, "__name__", str(rule))] = n
    g.meta.setdefault("pass_stats", {})[NAME] = counts
    return g
