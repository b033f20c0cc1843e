"""Lowering: each op of the optimised graph -> one call of a `trnlab.kernels` kernel (or a free view).

    linear      -> matmul.linear(x [M, K], w [K, N], bias [N], activation, weight_layout, residual [M, N], tile_n)
    layer_norm -> [convert ->] linear, the intermediates at level "sbuf" in the memory plan
                -> fused.layer_norm_linear(x, gamma, beta, w, bias, ..., dtype): ONE call, region
                   "layer_norm.0+linear.0"; the normalised activations never go to HBM
    attention   -> attention.causal_attention_qkv(qkv [B, T, 3C], n_head, scale); for T = 32 or 64 and B >= 2
                   attention_packed.causal_attention_qkv_packed (128 // T sequences of a head per tile)
    decode_attention -> decode_attention.decode_attention(qkv [B, 3C], k_cache, v_cache [B, L, C], bias [B, L], n_head)
    layer_norm  -> norms.layer_norm(x [R, C], gamma, beta, eps)      rms_norm -> norms.rms_norm
    embedding   -> embedding.embedding(ids [N] int32, table [V, C])  add -> elementwise.add(a [R, C], b [R, C])
    gelu        -> activations.gelu(x [R, C], approximate)           softmax -> softmax.softmax(x [R, C])
    matmul      -> matmul.matmul(a [M, K], b [K, N])                 convert -> cast.cast(x [R, C], dtype)
    reshape     -> a view: the same HBM bytes with another shape (no instruction)

Every kernel call is traced later into ONE program (executable.py), inside a region named after
the op. Kernels take 2-D operands with the leading axes flattened, so each call records the shape each
operand is passed as. Each call is a *region* named after its op (`linear.3`) with the user's source
line, so the profile can say which line of the model every microsecond comes from.

An op with no kernel raises `CompileError` naming the op, its source line and the supported ops —
or, with `fallback=True`, runs on the host CPU (PyTorch): the graph marks those nodes `[host]` and
the program records each partition boundary (a tensor crossing between the device and the host);
`compiler.fallback` has the rules and each host call's cost (transfers and compute).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trnlab.compiler.errors import CompileError
from trnlab.compiler.fallback import host_cost, host_link_bandwidth, on_device
from trnlab.compiler.ir import Graph, Node

from trnlab.compiler.lower_nn import OPS as NN_OPS  # noqa: E402  (the ops of students' models)

SUPPORTED = ("embedding", "add", "linear", "matmul", "layer_norm", "rms_norm", "gelu", "softmax", "attention",
             "decode_attention", "convert", "reshape", "copy") + tuple(o for o in NN_OPS if o != "add")
FALLBACK_ADVICE = ("To run it on the host CPU instead: trnlab.compiler.compile(..., fallback=True), or "
                   "torch.compile(model, backend=\"trnlab\", options={\"fallback\": True}).")
KERNEL_OF = {"embedding": "embedding", "add": "add", "linear": "linear", "matmul": "matmul",
             "layer_norm": "layer_norm", "rms_norm": "rms_norm", "gelu": "gelu", "softmax": "softmax",
             "attention": "causal_attention_qkv", "decode_attention": "decode_attention", "convert": "cast"}


@dataclass
class Call:
    """One step of the program: a kernel call, a free view, or an op run on the host."""
    kind: str                      # "kernel" | "view" | "host"
    op: str                        # the IR op ("linear")
    region: str                    # "linear.3": the op's region in the profile
    inputs: list                   # value names
    output: str                    # value name
    out_shape: list                # the IR shape of the output
    kernel: str = ""               # trnlab.kernels name ("linear")
    views: list = field(default_factory=list)   # the shape each input is passed as (None: as it is)
    kwargs: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)   # host ops: the IR attrs to evaluate them
    source: str = ""
    dtype: str = ""                # the IR dtype of the output
    cost: dict = field(default_factory=dict)    # host ops: transfer and compute ns (compiler.fallback)

    def describe(self) -> str:
        if self.kind == "view":
            return f"view   %{self.output} = %{self.inputs[0]} as {self.out_shape}"
        if self.kind == "host":
            cost = (f" {self.cost['total_ns'] / 1e3:.1f} us: transfers {self.cost['transfer_ns'] / 1e3:.1f} us"
                    if self.cost else "")
            return f"host   %{self.output} = {self.op}({', '.join('%' + i for i in self.inputs)})  [CPU{cost}]"
        args = []
        for name, shape in zip(self.inputs, self.views):
            args.append(f"%{name}" + (f"{list(shape)}" if shape else ""))
        args += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"kernel %{self.output} = {self.kernel}({', '.join(args)})"


@dataclass
class LoweredGraph:
    """A graph lowered to kernel calls: calls in order, plus what the runtime needs to bind inputs and outputs."""
    target: str
    calls: list
    inputs: list                   # [(name, shape, dtype on the device)]
    outputs: list                  # value names
    output_spec: list              # the model's return structure (index into outputs or None)
    constants: list                # value names of the resident constants
    boundaries: list = field(default_factory=list)   # [(value, "neuron->host" | "host->neuron")]

    def listing(self) -> str:
        lines = [f"program for {self.target}: {sum(c.kind == 'kernel' for c in self.calls)} kernel calls, "
                 f"{sum(c.kind == 'view' for c in self.calls)} views, {sum(c.kind == 'host' for c in self.calls)} "
                 f"host ops"]
        for c in self.calls:
            text = f"  {c.region:18s} {c.describe()}"
            lines.append(f"{text:100s}  # {c.source}" if c.source else text)
        for value, direction in self.boundaries:
            lines.append(f"  partition boundary: %{value} {direction}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.listing()

    def to_json(self) -> dict:
        d = asdict(self)
        d["calls"] = [asdict(c) for c in self.calls]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "LoweredGraph":
        d = dict(d)
        d["calls"] = [Call(**c) for c in d["calls"]]
        d["inputs"] = [tuple(x) for x in d["inputs"]]
        d["boundaries"] = [tuple(x) for x in d["boundaries"]]
        return cls(**d)


def _rows(shape) -> list:
    """[R, C] view of a tensor: leading axes flattened."""
    shape = list(shape)
    if not shape:                                # a number (a full reduction)
        return [1, 1]
    if len(shape) == 1:
        return [1, shape[0]]
    r = 1
    for s in shape[:-1]:
        r *= s
    return [r, shape[-1]]


def _unsupported(node: Node, why: str = "") -> CompileError:
    where = f" at {node.source}" if node.source else ""
    return CompileError(
        f"cannot lower op {node.op!r} (%{node.name}){where}: {why or 'no kernel implements it'}. "
        f"Supported ops: {', '.join(SUPPORTED)}. {FALLBACK_ADVICE}",
        op=node.op, source=node.source, supported=SUPPORTED)


def sbuf_chain(g: Graph, node: Node, users: dict | None = None) -> list | None:
    """The values a fused kernel keeps in SBUF when `node` starts a chain it implements:
    layer_norm -> [convert] -> linear, free views (reshape) anywhere between, the linear reading the
    chain's end as its x; every link read by the next one only. The names of the chain's nodes before
    the linear (views included), or None."""
    if node.op != "layer_norm" or len(node.inputs) not in (2, 3):
        return None
    users = users if users is not None else g.users()
    chain = [node.name]
    converts = 0
    while True:
        nxt = users.get(chain[-1], [])
        if len(nxt) != 1 or chain[-1] in g.outputs:
            return None
        n = nxt[0]
        if n.op == "linear":
            return chain if n.inputs[0] == chain[-1] else None
        if n.op in ("reshape", "copy") or (n.op == "convert" and converts == 0):
            converts += n.op == "convert"
            chain.append(n.name)
            continue
        return None


def on_chip_values(g: Graph, chain: list) -> list:
    """The tensors of a chain that would go through HBM without the fusion (its views are no tensors)."""
    from trnlab.compiler.ops import VIEW_OPS
    ops = {n.name: n.op for n in g.nodes}
    return [v for v in chain if ops.get(v) not in VIEW_OPS]


def _fused_chain(g: Graph, nodes: list, i: int) -> list | None:
    """The nodes nodes[i:...] the lowering fuses because the memory plan keeps their intermediates in SBUF."""
    tensors = g.meta.get("memory", {}).get("tensors", {})
    chain = sbuf_chain(g, nodes[i])
    if not chain or not all(tensors.get(v, {}).get("level") == "sbuf" for v in on_chip_values(g, chain)):
        return None
    span = nodes[i:i + len(chain) + 1]
    if [n.name for n in span[:-1]] != chain or span[-1].op != "linear":
        return None                              # not adjacent in the schedule
    return span


def _lower_fused(g: Graph, span: list, regions: list) -> Call:
    ln, lin = span[0], span[-1]
    lin_call = _lower_node(g, lin, regions[-1])
    x, gamma = ln.inputs[0], ln.inputs[1]
    beta = ln.inputs[2] if len(ln.inputs) > 2 else None
    operand = g.values[lin.inputs[0]].dtype
    inputs = [x, gamma, beta] + lin_call.inputs[1:]
    views = [_rows(g.values[x].shape), None, None] + lin_call.views[1:]
    kwargs = dict(lin_call.kwargs, eps=ln.attrs.get("eps", 1e-5), dtype=operand)
    return Call("kernel", "layer_norm+linear", f"{regions[0]}+{regions[-1]}",
                inputs, lin.name, list(g.values[lin.name].shape), "layer_norm_linear", views, kwargs,
                source=ln.source, dtype=g.values[lin.name].dtype)


def _lower_node(g: Graph, node: Node, region: str) -> Call:
    v = g.values[node.name]
    ins = [g.values[i] for i in node.inputs]
    call = Call("kernel", node.op, region, list(node.inputs), node.name, list(v.shape), KERNEL_OF.get(node.op, ""),
                source=node.source, dtype=v.dtype)
    op = node.op
    if op in ("reshape", "copy"):
        call.kind, call.kernel = "view", ""
    elif op == "embedding":
        table, ids = ins
        if len(table.shape) != 2:
            raise _unsupported(node, f"embedding table of rank {len(table.shape)}")
        call.inputs = call.inputs[::-1]          # the kernel takes (ids [N] int32, table [V, C])
        call.views = [[int(_rows(ids.shape)[0] * _rows(ids.shape)[1])], None]
    elif op == "add" and ("scalar" in node.attrs or ins[0].shape != ins[1].shape):
        raise _Delegate()
    elif op == "add":
        if ins[0].dtype != v.dtype:              # the kernel returns a's dtype: put the wider one first
            call.inputs = call.inputs[::-1]
        call.views = [_rows(v.shape), _rows(v.shape)]
    elif op == "linear":
        residual = call.inputs[-1] if node.attrs.get("residual") else None
        args = call.inputs[:-1] if residual else call.inputs
        call.inputs = (args + [None])[:3]                       # x, w, bias (None: no bias)
        call.views = [None] * 3
        call.kwargs = {"activation": node.attrs.get("activation"), "weight_layout": node.attrs["weight_layout"]}
        if residual:
            call.inputs.append(residual)
            call.views.append(None)
            call.kwargs["residual"] = True                      # the 4th input (the kernel's residual=)
        tiles = node.attrs.get("tiles")
        if tiles and tiles.get("n") < min(512, v.shape[-1]):      # the tiling pass chose narrower tiles
            call.kwargs["tile_n"] = tiles["n"]
    elif op == "matmul":
        if any(len(i.shape) != 2 for i in ins):
            raise _unsupported(node, "matmul of rank > 2 operands")
        call.views = [None, None]
    elif op in ("layer_norm", "rms_norm"):
        call.views = [_rows(ins[0].shape)] + [None] * (len(ins) - 1)
        call.kwargs = {"eps": node.attrs.get("eps", 1e-5)}
    elif op == "gelu":
        call.views = [_rows(v.shape)]
        call.kwargs = {"approximate": node.attrs.get("approximate", "none")}
    elif op == "softmax":
        if node.attrs.get("dim", -1) != -1:
            raise _unsupported(node, "softmax over an axis other than the last")
        call.views = [_rows(v.shape)]
    elif op == "attention":
        from trnlab.kernels.attention_packed import packable
        call.views = [None]
        call.kwargs = {"n_head": node.attrs["n_head"], "scale": node.attrs.get("scale")}
        B, T = ins[0].shape[0], ins[0].shape[1]
        if len(ins[0].shape) == 3 and packable(B, T):       # short sequences: 128 // T of them per tile
            call.kernel = "causal_attention_qkv_packed"
    elif op == "decode_attention":
        call.views = [None] * 4
        call.kwargs = {"n_head": node.attrs["n_head"]}
    elif op == "convert":
        call.views = [_rows(v.shape)]
        call.kwargs = {"dtype": node.attrs["dtype"]}
    else:
        raise _Delegate()
    return call


class _Delegate(Exception):
    """Not one of the GPT's ops: `lower_nn` lowers it."""


def lower_calls(g: Graph, node: Node, region: str) -> list:
    """The calls of one op: `_lower_node`'s one call, or `lower_nn`'s (a kernel and the views around it)."""
    try:
        return [_lower_node(g, node, region)]
    except _Delegate:
        from trnlab.compiler import lower_nn
        return lower_nn.lower_node(g, node, region, Call, _unsupported)


def _cost_host_calls(g: Graph, calls: list, target) -> None:
    """Each host call's cost: what it reads from the device, its compute, its output sent back, over
    the target's host link (compiler.fallback)."""
    link = host_link_bandwidth(target) if any(c.kind == "host" for c in calls) else 0.0
    host = {c.output for c in calls if c.kind == "host"}
    readers: dict = {}
    for c in calls:
        for x in c.inputs:
            if x is not None:
                readers.setdefault(x, []).append(c)
    for c in calls:
        if c.kind != "host":
            continue
        from_device = [g.values[x].nbytes for x in dict.fromkeys(c.inputs) if x not in host]   # weights too: in HBM
        back = any(r.kind != "host" for r in readers.get(c.output, [])) or c.output in g.outputs
        c.cost = host_cost(from_device, sum(g.values[x].nbytes for x in c.inputs), g.values[c.output].nbytes, back,
                           link)


def lower(g: Graph, target: str = "trn2", fallback: bool = False) -> LoweredGraph:
    """The graph's program: one call per node, in order; see the module docstring."""
    calls = []
    counts: dict[str, int] = {}
    nodes = list(g.nodes)
    i = 0

    def region_of(node: Node) -> str:
        name = f"{node.op}.{counts.get(node.op, 0)}"
        counts[node.op] = counts.get(node.op, 0) + 1
        return name

    while i < len(nodes):
        span = _fused_chain(g, nodes, i)
        if span:
            regions = [region_of(n) for n in span if n.op not in ("reshape", "copy", "convert")]
            calls.append(_lower_fused(g, span, regions))
            for n in span:
                n.device = "neuron"
            i += len(span)
            continue
        node = nodes[i]
        i += 1
        region = region_of(node)
        try:
            dtypes = [g.values[x].dtype for x in node.inputs] + [g.values[node.name].dtype]
            if not all(on_device(d) for d in dtypes):
                raise _unsupported(node, f"a tensor of dtype {[d for d in dtypes if not on_device(d)][0]}, which "
                                         f"the device does not hold")
            calls.extend(lower_calls(g, node, region))
            node.device = "neuron"
        except CompileError:
            if not fallback:
                raise
            node.device = "host"
            calls.append(Call("host", node.op, region, list(node.inputs), node.name, list(g.values[node.name].shape),
                              attrs=node.attrs, source=node.source, dtype=g.values[node.name].dtype))
    _cost_host_calls(g, calls, target)
    boundaries = []
    device_of = {n.name: n.device for n in g.nodes}
    for n in g.nodes:
        for i in n.inputs:
            src = device_of.get(i, "neuron")
            if src != n.device and (i, f"{src}->{n.device}") not in boundaries:
                boundaries.append((i, f"{src}->{n.device}"))
    inputs = [(n, list(g.values[n].shape), "int32" if g.values[n].dtype == "int64" else g.values[n].dtype)
              for n in g.inputs]
    return LoweredGraph(target, calls, inputs, list(g.outputs), list(g.meta.get("output_spec", range(len(g.outputs)))),
                   list(g.constants), boundaries)
