"""The compiler's graph IR: tensors with a shape and a dtype, ops that make them, a readable text form.

A `Graph` is plain data you can print, copy, save as JSON and rewrite:

    graph gpt
      input %idx : i64[1, 32]
      param %wte : f32[43, 64]
      %embedding : f32[1, 32, 64] = embedding(%wte, %idx)     # gpt.py:127  x = self.drop(self.wte(idx) + ...)
      ...
      return %logits

- every node makes exactly one value, named like the node (`%embedding`);
- `inputs` are the arguments the user passes at run time; `constants` hold the weights (params, which
  stay resident in HBM) and compile-time constants (a causal mask, folded tables) as NumPy arrays;
- `node.attrs` holds plain data only (ints, floats, strings, lists, dicts), so a graph is JSON;
- `node.source` is the user's Python line that produced the op ("gpt.py:64  scores = ..."), carried
  through every pass into the kernel regions and the profile.

The text form follows XLA's HLO text in spirit (a value, its type, the op and its operands); shapes
are written `f32[B, T, C]` with short dtype names.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int64": "i64", "int32": "i32", "bool": "pred",
         "float64": "f64", "int8": "i8", "uint8": "u8", "int16": "i16", "complex64": "c64", "complex128": "c128"}
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "bool": 1, "float64": 8, "int8": 1,
            "uint8": 1, "int16": 2, "complex64": 8, "complex128": 16}


@dataclass
class Value:
    """A tensor in the graph: its name, shape and dtype, and what kind of thing it is."""
    name: str
    shape: tuple
    dtype: str                      # "float32", "bfloat16", "int64", "bool", ...
    kind: str = "node"              # "input" | "param" (a weight) | "const" (compile-time constant) | "node"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * ITEMSIZE.get(self.dtype, 4)

    def type_str(self) -> str:
        return f"{SHORT.get(self.dtype, self.dtype)}[{', '.join(map(str, self.shape))}]"


@dataclass
class Node:
    """One op: `out = op(*inputs, **attrs)`; `inputs` are value names, `attrs` plain data."""
    name: str
    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    source: str = ""                # "file.py:line  code" of the user's line, "" if unknown
    device: str = "neuron"          # "neuron" or "host" (a CPU fallback partition)


class Graph:
    """Values, the nodes in execution order, inputs, outputs and constants."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.constants: dict[str, np.ndarray] = {}   # params and consts, by value name
        self.meta: dict = {}                         # what passes leave for later passes (memory plan, ...)

    # -- building --------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A value name not used yet, from `base`."""
        base = base.replace(".", "_")
        if base not in self.values:
            return base
        i = 1
        while f"{base}_{i}" in self.values:
            i += 1
        return f"{base}_{i}"

    def add_input(self, name: str, shape, dtype: str) -> Value:
        v = Value(name, tuple(int(s) for s in shape), dtype, "input")
        self.values[name] = v
        self.inputs.append(name)
        return v

    def add_constant(self, name: str, array: np.ndarray, kind: str = "const") -> Value:
        from trnlab.compiler.ops import dtype_name
        array = np.asarray(array)
        v = Value(name, tuple(array.shape), dtype_name(array.dtype), kind)
        self.values[name] = v
        self.constants[name] = array
        return v

    def add_node(self, op: str, inputs: list, shape, dtype: str, attrs: dict | None = None, source: str = "",
                 name: str | None = None, before: Node | None = None) -> Node:
        """Append a node (or insert it before `before`); returns it. Its value has the node's name."""
        name = self.fresh(name or op)
        node = Node(name, op, list(inputs), dict(attrs or {}), source)
        self.values[name] = Value(name, tuple(int(s) for s in shape), dtype, "node")
        if before is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(self.nodes.index(before), node)
        return node

    # -- queries ---------------------------------------------------------------------------------
    def node(self, name: str) -> Node | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def producers(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def users(self) -> dict[str, list[Node]]:
        """value name -> the nodes that read it (in order)."""
        out: dict[str, list[Node]] = {name: [] for name in self.values}
        for n in self.nodes:
            for i in n.inputs:
                out.setdefault(i, []).append(n)
        return out

    def replace_uses(self, old: str, new: str) -> None:
        """Every reader of `old` (nodes and graph outputs) reads `new` instead."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove_unused(self) -> list[str]:
        """Dead-code elimination: drop nodes whose value nobody reads, and unused constants."""
        removed = []
        changed = True
        while changed:
            changed = False
            used = set(self.outputs)
            for n in self.nodes:
                used.update(n.inputs)
            for n in list(self.nodes):
                if n.name not in used:
                    self.nodes.remove(n)
                    del self.values[n.name]
                    removed.append(n.name)
                    changed = True
        used = set(self.outputs)
        for n in self.nodes:
            used.update(n.inputs)
        for name in list(self.constants):
            if name not in used:
                del self.constants[name]
                del self.values[name]
        return removed

    def ops(self) -> dict[str, int]:
        """How many nodes of each op."""
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def copy(self) -> "Graph":
        g = Graph(self.name)
        g.values = {k: copy.copy(v) for k, v in self.values.items()}
        g.nodes = [Node(n.name, n.op, list(n.inputs), copy.deepcopy(n.attrs), n.source, n.device) for n in self.nodes]
        g.inputs, g.outputs = list(self.inputs), list(self.outputs)
        g.constants = dict(self.constants)          # arrays are never modified in place: sharing is safe
        g.meta = copy.deepcopy(self.meta)
        return g

    # -- text ------------------------------------------------------------------------------------
    def to_text(self, sources: bool = True) -> str:
        lines = [f"graph {self.name}"]
        for name in self.inputs:
            lines.append(f"  input %{name} : {self.values[name].type_str()}")
        for name in self.constants:
            v = self.values[name]
            lines.append(f"  {v.kind:5s} %{name} : {v.type_str()}")
        width = 0
        body = []
        for n in self.nodes:
            v = self.values[n.name]
            args = ", ".join(f"%{i}" for i in n.inputs)
            if n.op.startswith("aten."):          # show the plain arguments, not the template
                plain = [_short(a) for a in n.attrs.get("args", []) if not _is_tensor_arg(a)]
                plain += [f"{k}={_short(a)}" for k, a in (n.attrs.get("kwargs") or {}).items()
                          if not isinstance(a, dict)]
                if "item" in n.attrs:
                    plain.append(f"item={n.attrs['item']}")
                attrs = ", ".join(plain)
            else:
                attrs = ", ".join(f"{k}={_short(a)}" for k, a in n.attrs.items() if not k.startswith("_"))
            text = f"  %{n.name} : {v.type_str()} = {n.op}({args}{', ' if args and attrs else ''}{attrs})"
            if n.device == "host":
                text = "  [host]" + text[1:]
            body.append((text, n.source))
            width = max(width, len(text))
        width = min(width, 100)
        for text, source in body:
            lines.append(f"{text:{width}s}   # {source}" if sources and source else text)
        lines.append("  return " + ", ".join(f"%{o}" for o in self.outputs))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes, ops={self.ops()})"

    # -- JSON ------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The graph without constant data (that goes to safetensors): plain JSON."""
        return {
            "name": self.name,
            "values": [[v.name, list(v.shape), v.dtype, v.kind] for v in self.values.values()],
            "nodes": [{"name": n.name, "op": n.op, "inputs": n.inputs, "attrs": n.attrs, "source": n.source,
                       "device": n.device} for n in self.nodes],
            "inputs": self.inputs, "outputs": self.outputs, "constants": list(self.constants),
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict, constants: dict[str, np.ndarray]) -> "Graph":
        g = cls(data["name"])
        for name, shape, dtype, kind in data["values"]:
            g.values[name] = Value(name, tuple(shape), dtype, kind)
        g.nodes = [Node(n["name"], n["op"], list(n["inputs"]), dict(n["attrs"]), n["source"], n["device"])
                   for n in data["nodes"]]
        g.inputs, g.outputs = list(data["inputs"]), list(data["outputs"])
        g.constants = {name: constants[name] for name in data["constants"]}
        g.meta = dict(data.get("meta", {}))
        return g


def _is_tensor_arg(a) -> bool:
    return isinstance(a, dict) or (isinstance(a, list) and any(isinstance(x, dict) for x in a))


def _short(a) -> str:
    if isinstance(a, float):
        return repr(a) if abs(a) not in (float("inf"),) else ("-inf" if a < 0 else "inf")
    if isinstance(a, (list, tuple)) and len(a) > 8:
        return f"[{', '.join(map(str, a[:4]))}, ... {len(a)} items]"
    if isinstance(a, dict):
        return "{...}"
    return str(a)
