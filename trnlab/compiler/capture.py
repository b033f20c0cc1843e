"""Capture: a PyTorch model -> an FX graph of core ATen ops -> our graph IR (`ir.Graph`).

Two front doors, as on AWS's PyTorch path:

- `capture_export(model, example_inputs)`: `torch.export.export` (ahead of time, the whole forward
  as one graph), then `run_decompositions()` to the core ATen op set;
- `from_fx(gm, ...)`: any FX graph of ATen ops, e.g. the forward graph AOT Autograd hands to the
  registered Dynamo backend (`torch.compile(model, backend="trnlab")`, see `dynamo.py`).

Each FX node becomes one IR node `aten.<op>.<overload>` whose attrs keep the non-tensor arguments as
plain data, and whose `source` is the user's line (the last stack frame outside torch itself). Weights
become `param` constants (tied weights, one tensor under two names, become one constant); buffers
become `const`. Shapes must be numbers: a symbolic size raises `DynamicShapeError`.
"""
from __future__ import annotations

import operator
import os
import re
import time

import numpy as np
import torch

from trnlab.compiler.errors import DynamicShapeError
from trnlab.compiler.ir import Graph
from trnlab.compiler.ops import dtype_name, encode_arg, to_numpy

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)')


def source_line(stack_trace: str | None) -> str:
    """'gpt.py:58  q, k, v = self.qkv(x).split(C, dim=2)': the user's frame of an FX node's stack trace."""
    if not stack_trace:
        return ""
    frames = _FRAME.findall(stack_trace)
    user = [f for f in frames if f"{os.sep}torch{os.sep}" not in f[0] and "site-packages" not in f[0]]
    if not user:
        return ""
    path, line, code = user[-1]
    code = code.split("  #")[0].strip()
    return f"{os.path.basename(path)}:{line}  {code}"


def _shape(val, what: str) -> tuple:
    shape = []
    for i, s in enumerate(val.shape):
        if not isinstance(s, int):
            try:
                s = int(s)
            except Exception:  # a SymInt with no single value
                raise DynamicShapeError(
                    f"dynamic shape: {what} has a symbolic size {s} in dimension {i}; Neuron compiles one graph "
                    f"per input shape (a bucket): compile with example inputs of each shape you will run",
                    op=what) from None
        shape.append(s)
    return tuple(shape)


def _aten_name(target) -> str:
    schema = target._schema
    overload = schema.overload_name or "default"
    return f"{schema.name.replace('::', '.')}.{overload}"


def from_fx(gm: torch.fx.GraphModule, placeholders: dict, name: str = "graph") -> Graph:
    """An FX graph of ATen ops -> ir.Graph.

    placeholders: FX placeholder name -> ("input", None) | ("param", array, param_name) | ("const", array, name).
    """
    g = Graph(name)
    env: dict[str, str] = {}              # FX node name -> IR value name
    by_storage: dict[tuple, str] = {}     # (data_ptr, shape, dtype) -> constant name: tied weights once
    multi: dict[str, torch.fx.Node] = {}  # FX nodes with several outputs, used through getitem
    outputs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            kind, *rest = placeholders[node.name]
            if kind == "input":
                val = node.meta.get("val")
                if val is None:
                    val = node.meta.get("example_value")
                env[node.name] = g.add_input(node.name, _shape(val, f"input {node.name}"),
                                             dtype_name(val.dtype)).name
            else:
                tensor, cname = rest
                key = (tensor.untyped_storage().data_ptr(), tuple(tensor.shape), tensor.dtype, tensor.storage_offset())
                if key in by_storage:
                    env[node.name] = by_storage[key]
                    continue
                cname = g.fresh(cname)
                g.add_constant(cname, to_numpy(tensor.detach()), kind)
                env[node.name] = by_storage[key] = cname
        elif node.op == "call_function":
            val = node.meta.get("val")
            source = source_line(node.meta.get("stack_trace"))
            if node.target is operator.getitem:
                parent, item = node.args
                target = multi[parent.name]
                _add_aten(g, env, target, node, val, source, item=item)
                continue
            if isinstance(val, (tuple, list)):
                multi[node.name] = node
                continue
            _add_aten(g, env, node, node, val, source)
        elif node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (tuple, list)) else [outs]
            for o in outs:
                outputs.append(env[o.name] if isinstance(o, torch.fx.Node) else None)
        elif node.op == "get_attr":
            tensor = getattr(gm, node.target)
            env[node.name] = g.add_constant(g.fresh(node.target), to_numpy(tensor.detach()), "const").name
    g.outputs = [o for o in outputs if o is not None]
    # the model's return structure: position -> index into g.outputs, or None (e.g. GPT's loss=None)
    k = iter(range(len(g.outputs)))
    g.meta["output_spec"] = [None if o is None else next(k) for o in outputs]
    return g


def _add_aten(g: Graph, env: dict, target_node, node, val, source: str, item: int | None = None) -> None:
    if not isinstance(val, torch.Tensor):
        raise DynamicShapeError(f"op {node.name} ({target_node.target}) makes {type(val).__name__}, not a tensor: "
                                f"data-dependent or symbolic values are not compiled", op=str(target_node.target),
                                source=source)
    inputs: list[str] = []

    def index(a):
        if isinstance(a, torch.fx.Node):
            inputs.append(env[a.name])
            return len(inputs) - 1
        return None

    attrs = {"args": encode_arg(list(target_node.args), index),
             "kwargs": {k: encode_arg(v, index) for k, v in target_node.kwargs.items()}}
    if item is not None:
        attrs["item"] = item
    op = _aten_name(target_node.target)
    shape = _shape(val, f"{op} ({node.name})")
    n = g.add_node(op, inputs, shape, dtype_name(val.dtype), attrs, source, name=node.name)
    env[node.name] = n.name


KEPT_WHOLE = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_attention_math")


def decompositions(table: dict | None = None) -> dict:
    """Core ATen decompositions minus attention: F.scaled_dot_product_attention stays one op, so that
    `legalise_nn` can put it on the attention kernel instead of a dozen ops around a softmax."""
    if table is None:
        table = dict(torch.export.default_decompositions())
    return {op: fn for op, fn in table.items()
            if not any(str(op).startswith(f"aten.{name}.") for name in KEPT_WHOLE)}


def capture_export(model: torch.nn.Module, example_inputs: tuple, name: str | None = None) -> tuple[Graph, dict]:
    """torch.export + core ATen decompositions -> ir.Graph; also returns the time of each step (s)."""
    import warnings
    times = {}
    with warnings.catch_warnings():                 # torch's own deprecation notices, not the user's business
        warnings.simplefilter("ignore", FutureWarning)
        t0 = time.perf_counter()
        exported = torch.export.export(model, tuple(example_inputs))
        times["torch.export"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        exported = exported.run_decompositions(decompositions())    # to core ATen, attention kept whole
        times["decompose"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    from torch.export.graph_signature import InputKind
    placeholders = {}
    for spec in exported.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            placeholders[spec.arg.name] = ("input", None)
        elif spec.kind == InputKind.PARAMETER:
            placeholders[spec.arg.name] = ("param", exported.state_dict[spec.target], spec.target.replace(".", "_"))
        else:                                       # buffers and lifted constant tensors
            tensor = exported.state_dict.get(spec.target) if spec.target in exported.state_dict \
                else exported.constants[spec.target]
            placeholders[spec.arg.name] = ("const", tensor, spec.target.replace(".", "_"))
    graph = from_fx(exported.graph_module, placeholders, name or type(model).__name__)
    times["to IR"] = time.perf_counter() - t0
    return graph, times


def example_signature(graph: Graph) -> list[tuple]:
    """(name, shape, dtype) of each runtime input: what the compiled graph accepts."""
    return [(n, graph.values[n].shape, graph.values[n].dtype) for n in graph.inputs]


def as_arrays(inputs) -> list[np.ndarray]:
    return [to_numpy(x) if isinstance(x, torch.Tensor) else np.asarray(x) for x in inputs]
