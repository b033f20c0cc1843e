"""Lower a joint forward + backward graph to kernel calls: the training step's program, before tracing.

The graph comes from `capture.capture_joint` through `legalise`, `legalise_training` and `fold`. Three
rewrites first, each because the Tensor engine reads a transposed operand for free:

- transposes of transposes compose (the backward transposes weights that the forward transposed);
- `matmul(transpose(a), b)` and `matmul(a, transpose(b))` become one `matmul_t` with a flag (the
  weight gradient x.T @ g, and x @ W.T of nn.Linear): no transpose is materialised; the same for the
  batched matmuls of attention (q @ k.T, and the four matmuls of its backward);
- `add(matmul(x, W.T), broadcast(bias))` becomes one `matmul_t` with the bias added on PSUM exit.

Then one `StepCall` per node: a kernel of `trnlab.kernels` (with the 2-D view each operand is passed
as) or a free view (reshape). A call may have several outputs (layer_norm_backward: dx, dgamma, dbeta).
Every call knows whether it belongs to the forward (the loss depends on it) or the backward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trnlab.compiler.errors import CompileError
from trnlab.compiler.ir import Graph, Node

MATMULS = ("matmul", "batch_matmul")


@dataclass
class StepCall:
    """One step of the training program: a kernel call or a free view."""
    kind: str                      # "kernel" | "view"
    op: str                        # the IR op
    region: str                    # "forward/matmul.3"
    kernel: str                    # "shape_ops.matmul_t", "norms.layer_norm", ...
    inputs: list                   # value names (None: an absent optional operand)
    views: list                    # the shape each input is passed as (None: as it is)
    outputs: list                  # value names of the kernel's outputs (None: an output nobody reads)
    out_shapes: list               # the IR shape of each output
    kwargs: dict = field(default_factory=dict)
    source: str = ""
    phase: str = "forward"         # "forward" | "backward" | "optimizer"

    def describe(self) -> str:
        if self.kind == "view":
            return f"view   %{self.outputs[0]} = %{self.inputs[0]} as {self.out_shapes[0]}"
        args = [f"%{n}" + (f"{list(s)}" if s else "") if n is not None else "None"
                for n, s in zip(self.inputs, self.views)]
        args += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        outs = ", ".join(f"%{o}" if o else "_" for o in self.outputs)
        return f"kernel {outs} = {self.kernel}({', '.join(args)})"


def _rows(shape) -> list:
    """[R, C] view: leading axes flattened (a 1-D tensor is one row; a scalar is [1, 1])."""
    shape = list(shape)
    if not shape:
        return [1, 1]
    if len(shape) == 1:
        return [1, shape[0]]
    return [int(np.prod(shape[:-1])), shape[-1]]


def _unsupported(node: Node, why: str) -> CompileError:
    where = f" at {node.source}" if node.source else ""
    return CompileError(f"cannot lower training op {node.op!r} (%{node.name}){where}: {why}", op=node.op,
                        source=node.source)


# -- rewrites ---------------------------------------------------------------------------------------------
def _swaps_last_two(perm) -> bool:
    n = len(perm)
    return n >= 2 and list(perm) == list(range(n - 2)) + [n - 1, n - 2]


def _supported_perm(perm) -> bool:
    return list(perm) == [1, 0] or _swaps_last_two(perm) or list(perm) == [0, 2, 1, 3]


def compose_transposes(g: Graph) -> int:
    """transpose(transpose(x, p), q) -> transpose(x, p∘q) (removed if the identity)."""
    changed = 0
    producers = g.producers()
    for node in list(g.nodes):
        if node.op != "transpose":
            continue
        inner = producers.get(node.inputs[0])
        if inner is None or inner.op != "transpose":
            continue
        perm = [inner.attrs["perm"][p] for p in node.attrs["perm"]]
        if not (perm == list(range(len(perm))) or _supported_perm(perm)):
            continue                                   # two kernels we have beat one we do not
        node.inputs, node.attrs = [inner.inputs[0]], {"perm": perm}
        if perm == list(range(len(perm))):
            g.replace_uses(node.name, inner.inputs[0])
            g.nodes.remove(node)
            del g.values[node.name]
        changed += 1
    g.remove_unused()
    return changed


def _transposed_source(g: Graph, producers: dict, name: str, rank: int):
    """If `name` is x with its last two axes swapped (a transpose, maybe viewed to `rank` dims), the
    name of x seen with `rank` dims, else None."""
    node = producers.get(name)
    if node is not None and node.op == "transpose" and _swaps_last_two(node.attrs["perm"]):
        if len(g.values[node.name].shape) == rank:
            return node.inputs[0], None
    if node is not None and node.op == "reshape":
        inner = producers.get(node.inputs[0])
        if inner is not None and inner.op == "transpose" and _swaps_last_two(inner.attrs["perm"]):
            src = g.values[inner.inputs[0]].shape
            out = g.values[node.name].shape
            if tuple(out[-2:]) == tuple(src[-2:][::-1]) and math.prod(out) == math.prod(src):
                return inner.inputs[0], [*out[:-2], src[-2], src[-1]]       # x viewed [G, N, M]
    return None


def transposed_products(g: Graph) -> int:
    """transpose(a @ b) -> b.T @ a.T for a 2-D product read only by the transpose (a weight gradient
    that the graph wants in nn.Linear's [out, in] layout): the operands swap, nothing is transposed."""
    changed = 0
    producers, users = g.producers(), g.users()
    for node in list(g.nodes):
        if node.op != "transpose" or list(node.attrs["perm"]) != [1, 0]:
            continue
        mm = producers.get(node.inputs[0])
        if mm is None or mm.op != "matmul" or len(users.get(mm.name, [])) != 1 or mm.attrs.get("bias"):
            continue
        a, b = mm.inputs[:2]
        out = g.values[node.name]
        node.op, node.inputs = "matmul", [b, a]
        node.attrs = {"transpose_a": not mm.attrs.get("transpose_b", False),
                      "transpose_b": not mm.attrs.get("transpose_a", False), "views": [None, None]}
        del out
        changed += 1
    g.remove_unused()
    return changed


def fold_matmul_transposes(g: Graph) -> int:
    """matmul(transpose(a), b) -> matmul(a, b, transpose_a=True) (a flag already set is toggled), the same for
    b and for batch_matmul."""
    changed = 0
    producers = g.producers()
    for node in g.nodes:
        if node.op not in MATMULS:
            continue
        rank = len(g.values[node.name].shape)
        views = node.attrs.setdefault("views", [None, None])
        for i, flag in ((0, "transpose_a"), (1, "transpose_b")):
            found = _transposed_source(g, producers, node.inputs[i], rank)
            if found is not None and views[i] is None:
                node.inputs[i], views[i] = found
                node.attrs[flag] = not node.attrs.get(flag, False)      # op(x.T) with the flag toggled
                changed += 1
    g.remove_unused()
    return changed


def fuse_bias(g: Graph) -> int:
    """add(matmul(x, w), broadcast(bias [N])) -> matmul(x, w, bias) when the product has no other reader."""
    changed = 0
    producers, users = g.producers(), g.users()
    for node in list(g.nodes):
        if node.op != "add" or len(node.inputs) != 2:
            continue
        for i in (0, 1):
            mm, other = producers.get(node.inputs[i]), producers.get(node.inputs[1 - i])
            if mm is None or mm.op != "matmul" or len(users.get(mm.name, [])) != 1 or "bias" in mm.attrs:
                continue
            if other is None or other.op != "broadcast" or len(g.values[other.inputs[0]].shape) != 1:
                continue
            mm.inputs = mm.inputs + [other.inputs[0]]
            mm.attrs["bias"] = True
            g.replace_uses(node.name, mm.name)
            g.nodes.remove(node)
            del g.values[node.name]
            changed += 1
            break
    g.remove_unused()
    return changed


def prepare(g: Graph) -> Graph:
    """The training graph's passes, in order: legalise, legalise_training and fold, then the
    transpose and bias rewrites above (fold_matmul_transposes twice: transposed_products makes new
    candidates). Used by `compile_train_step` and by the `torch.compile` path (aot.py)."""
    from trnlab.compiler.passes import (convolution, fold, legalise, legalise_nn, legalise_nn_training,
                                        legalise_training)
    # legalise_nn_training twice: its attention-guard rule reads the mask once `fold` made it a constant
    for p in (legalise, legalise_training, legalise_nn, legalise_nn_training, fold, legalise_nn_training, fold,
              convolution):
        g = p.run(g)
    compose_transposes(g)
    fold_matmul_transposes(g)
    transposed_products(g)
    fold_matmul_transposes(g)
    fuse_bias(g)
    from trnlab.compiler.passes import broadcasts
    broadcasts.run(g, inner_only=True)        # RMSNorm's one number per row, read in place
    return g


def autocast_matmuls(g: Graph, low: str = "bfloat16") -> int:
    """`--auto-cast matmult` for training: the two operands of every matmul are converted to `low`
    (one convert per value); accumulation is fp32 in PSUM and the product leaves in fp32, so the
    gradients and the optimizer stay fp32 (master weights)."""
    cache: dict = {}
    count = 0
    for node in list(g.nodes):
        if node.op not in MATMULS:
            continue
        for i in (0, 1):
            name = node.inputs[i]
            v = g.values[name]
            if v.dtype != "float32":
                continue
            if name not in cache:
                cache[name] = g.add_node("convert", [name], v.shape, low, {"dtype": low}, node.source,
                                         name=f"{name}_{low[:4]}", before=node).name
                count += 1
            node.inputs[i] = cache[name]
    return count


def forward_nodes(g: Graph, loss: str) -> set:
    """The nodes the loss depends on: the forward pass."""
    producers = g.producers()
    seen, stack = set(), [loss]
    while stack:
        name = stack.pop()
        node = producers.get(name)
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        stack.extend(node.inputs)
    return seen


# -- lowering ---------------------------------------------------------------------------------------------
def _trailing_block(shape, cond_shape) -> int | None:
    """The number of elements of `cond_shape` if it broadcasts over leading axes of `shape` only."""
    cond = list(cond_shape)
    while cond and cond[0] == 1:
        cond.pop(0)
    if list(shape[len(shape) - len(cond):]) != cond:
        return None
    return int(math.prod(cond)) if cond else 1


def _lower(g: Graph, node: Node, region: str, phase: str, new_constants: dict) -> StepCall:
    v = g.values[node.name]
    ins = [g.values[i] for i in node.inputs]
    out_shape = list(v.shape)

    def call(kernel, inputs, views, kwargs=None, outputs=None, shapes=None):
        return StepCall("kernel", node.op, region, kernel, list(inputs), list(views),
                        outputs or [node.name], shapes or [out_shape], dict(kwargs or {}), node.source, phase)

    op = node.op
    if op in ("reshape", "copy") or (op == "broadcast" and math.prod(ins[0].shape) == math.prod(v.shape)):
        return StepCall("view", op, region, "", [node.inputs[0]], [None], [node.name], [out_shape], {},
                        node.source, phase)
    if op == "broadcast":
        block = _trailing_block(v.shape, ins[0].shape)
        if block is None:
            raise _unsupported(node, f"broadcast of {list(ins[0].shape)} to {out_shape} over inner axes")
        src = _rows(ins[0].shape) if math.prod(ins[0].shape) == block else [1, block]
        return call("shape_ops.repeat_rows", node.inputs, [src], {"times": math.prod(v.shape) // block})
    if op == "transpose":
        perm = list(node.attrs["perm"])
        shape = ins[0].shape
        if perm == [1, 0]:
            return call("shape_ops.transpose_2d", node.inputs, [None])
        if _swaps_last_two(perm):
            return call("shape_ops.batch_transpose", node.inputs, [[math.prod(shape[:-2]), *shape[-2:]]])
        if len(perm) == 4 and perm == [0, 2, 1, 3]:
            return call("shape_ops.swap_middle_axes", node.inputs, [None])
        raise _unsupported(node, f"transpose with permutation {perm}")
    if op == "matmul":
        views = node.attrs.get("views", [None, None])
        kwargs = {"transpose_a": bool(node.attrs.get("transpose_a")),
                  "transpose_b": bool(node.attrs.get("transpose_b"))}
        if v.dtype != ins[0].dtype:
            kwargs["out_dtype"] = v.dtype
        inputs = list(node.inputs[:2]) + [node.inputs[2] if node.attrs.get("bias") else None]
        return call("shape_ops.matmul_t", inputs, list(views) + [None], kwargs)
    if op == "batch_matmul":
        views = node.attrs.get("views", [None, None])
        kwargs = {"transpose_a": bool(node.attrs.get("transpose_a")),
                  "transpose_b": bool(node.attrs.get("transpose_b"))}
        if v.dtype != ins[0].dtype:
            kwargs["out_dtype"] = v.dtype
        return call("shape_ops.batch_matmul", node.inputs, views, kwargs)
    if op == "add":
        if "scalar" in node.attrs or ins[0].shape != ins[1].shape:
            raise _unsupported(node, "add of two tensors of different shapes (a broadcast left over)")
        inputs = node.inputs if ins[0].dtype == v.dtype else node.inputs[::-1]
        return call("elementwise.add", inputs, [_rows(v.shape)] * 2)
    if op == "mul":
        if "scalar" in node.attrs:
            return call("shape_ops.scale", node.inputs, [_rows(v.shape)], {"factor": float(node.attrs["scalar"])})
        if ins[0].shape != ins[1].shape:
            raise _unsupported(node, "mul of two tensors of different shapes")
        return call("shape_ops.multiply", node.inputs, [_rows(v.shape)] * 2)
    if op == "where":
        cond, a, b = node.inputs
        if g.values[cond].kind != "const":
            raise _unsupported(node, "where with a condition computed at run time")
        mask = np.asarray(g.constants[cond]).astype(bool)
        scalar_a, scalar_b = g.values[a].shape == (), g.values[b].shape == ()
        if scalar_a == scalar_b or g.values[a if scalar_a else b].kind != "const":
            raise _unsupported(node, "where of two tensors (one side must be a constant number)")
        value = float(np.asarray(g.constants[a if scalar_a else b]))
        keep = ~mask if scalar_a else mask                       # where x is kept
        block = _trailing_block(v.shape, mask.shape)
        if block is None:
            raise _unsupported(node, f"a mask of shape {list(mask.shape)} for {out_shape}")
        keep_name = g.fresh(f"{node.name}_keep")
        new_constants[keep_name] = np.ascontiguousarray(keep.reshape(-1).astype(np.float32))
        x = b if scalar_a else a
        return call("shape_ops.masked_fill", [x, keep_name], [[math.prod(v.shape) // block, block], None],
                    {"value": value})
    if op == "sum":
        dims, shape = node.attrs["dims"], ins[0].shape
        k = len(dims)
        if dims == list(range(k)):                                # leading axes: a column sum
            return call("shape_ops.column_sum", node.inputs, [[math.prod(shape[:k]), math.prod(shape[k:])]])
        if dims == list(range(len(shape) - k, len(shape))):       # trailing axes: a row sum
            return call("shape_ops.row_sum", node.inputs, [[math.prod(shape[:-k]), math.prod(shape[-k:])]])
        raise _unsupported(node, f"sum over axes {dims} of {list(shape)}")
    if op == "slice":
        dim, start, end = node.attrs["dim"], node.attrs["start"], node.attrs["end"]
        if node.attrs.get("step", 1) != 1:
            raise _unsupported(node, "a strided slice")
        shape = ins[0].shape
        inner = math.prod(shape[dim + 1:])
        return call("shape_ops.slice_columns", node.inputs, [[math.prod(shape[:dim]), shape[dim] * inner]],
                    {"start": start * inner, "end": end * inner})
    if op == "concat":
        dim = node.attrs["dim"]
        views = []
        for x in ins:
            views.append([math.prod(x.shape[:dim]), math.prod(x.shape[dim:])])
        return call("shape_ops.concat_columns", node.inputs, views)
    if op == "embedding":
        table, ids = node.inputs
        return call("embedding.embedding", [ids, table], [[math.prod(g.values[ids].shape)], None])
    if op == "embedding_backward":
        ids, grad = node.inputs
        return call("embedding.embedding_backward", [ids, grad],
                    [[math.prod(g.values[ids].shape)], _rows(g.values[grad].shape)],
                    {"num_embeddings": node.attrs["num_embeddings"]})
    if op == "layer_norm":
        return call("norms.layer_norm", node.inputs, [_rows(ins[0].shape), None, None],
                    {"eps": node.attrs.get("eps", 1e-5)})
    if op == "layer_norm_backward":
        raise AssertionError("layer_norm_backward is lowered as a group")
    if op == "softmax":
        return call("softmax.softmax", node.inputs, [_rows(v.shape)])
    if op == "softmax_backward":
        return call("softmax.softmax_backward", node.inputs, [_rows(v.shape)] * 2)
    if op == "gelu":
        return call("activations.gelu", node.inputs, [_rows(v.shape)],
                    {"approximate": node.attrs.get("approximate", "none")})
    if op == "gelu_backward":
        return call("activations.gelu_backward", node.inputs, [_rows(v.shape)] * 2,
                    {"approximate": node.attrs.get("approximate", "none")})
    if op == "cross_entropy":
        logits, targets = node.inputs
        return call("cross_entropy.cross_entropy", [logits, targets],
                    [_rows(g.values[logits].shape), [math.prod(g.values[targets].shape)]],
                    {"ignore_index": node.attrs.get("ignore_index", -100)})
    if op == "cross_entropy_backward":
        logits, targets, grad = node.inputs
        return call("cross_entropy.cross_entropy_backward", [logits, targets, grad],
                    [_rows(g.values[logits].shape), [math.prod(g.values[targets].shape)], [1]],
                    {"ignore_index": node.attrs.get("ignore_index", -100)})
    if op == "convert":
        return call("cast.cast", node.inputs, [_rows(v.shape)], {"dtype": node.attrs["dtype"]})
    raise _unsupported(node, "no kernel implements it in the training lowering")


def lower_step(g: Graph, loss: str | None, phase: str | None = None) -> tuple[list, dict]:
    """([StepCall] in graph order, {new constant name: array}) for a joint graph (forward = what `loss`
    depends on), or, with `phase`, for a graph that is all one phase (AOT Autograd's separate forward
    and backward graphs, trnlab.training.aot)."""
    forward = forward_nodes(g, loss) if phase is None else set()
    calls, counts, new_constants = [], {}, {}
    grouped: dict = {}
    fixed = phase
    for node in g.nodes:
        phase = fixed or ("forward" if node.name in forward else "backward")
        label = node.op if node.op != "layer_norm_backward" else "layer_norm_backward"
        region = f"{phase}/{label}.{counts.get((phase, label), 0)}"
        if node.op == "layer_norm_backward":
            key = tuple(node.inputs) + (node.attrs.get("eps"),)
            if key in grouped:                                    # another output of the same kernel call
                grouped[key].outputs[node.attrs["item"]] = node.name
                grouped[key].out_shapes[node.attrs["item"]] = list(g.values[node.name].shape)
                continue
            x, w, dy = node.inputs
            outputs = [None, None, None]
            shapes = [list(g.values[x].shape), list(g.values[w].shape), list(g.values[w].shape)]
            outputs[node.attrs["item"]] = node.name
            shapes[node.attrs["item"]] = list(g.values[node.name].shape)
            c = StepCall("kernel", node.op, region, "norms.layer_norm_backward", [x, w, dy],
                         [_rows(g.values[x].shape), None, _rows(g.values[dy].shape)], outputs, shapes,
                         {"eps": node.attrs.get("eps", 1e-5)}, node.source, phase)
            grouped[key] = c
        else:
            try:
                c = _lower(g, node, region, phase, new_constants)
            except CompileError:                                  # the ops of students' models
                from trnlab.compiler import lower_nn
                more = lower_nn.lower_node(g, node, region, step_call(phase), _unsupported)
                counts[(phase, label)] = counts.get((phase, label), 0) + 1
                calls.extend(more)
                continue
        counts[(phase, label)] = counts.get((phase, label), 0) + 1
        calls.append(c)
    return calls, new_constants


def step_call(phase: str):
    """A `Call`-like factory that makes the training lowering's StepCalls, so `lower_node` serves both."""
    def make(kind, op, region, inputs, output, out_shape, kernel="", views=None, kwargs=None, source="", dtype=""):
        return StepCall(kind, op, region, kernel, list(inputs), list(views or [None]), [output], [list(out_shape)],
                        dict(kwargs or {}), source, phase)
    return make
