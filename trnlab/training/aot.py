"""AOT Autograd's forward and backward graphs, each compiled by the training lowering to one program.

`torch.compile(model, backend="trnlab")` on a model whose parameters need gradients hands AOT Autograd
a `fw_compiler` and a `bw_compiler` (trnlab.compiler.dynamo); both call `compile_phase` here. The chain
is the training step's (capture.decompositions, legalise + legalise_training + fold, lower.py's
rewrites and `lower_step`, step.run_calls, `nki.trace`, `Device.run`), on one graph at a time instead
of the joint graph: parameters are runtime inputs, buffers (the causal mask) constants.

Two things differ from the joint graph, both because the forward hands the backward its saved tensors:

- outputs the forward only passes along (a parameter, a tensor made of constants such as the causal
  mask's `bitwise_not`) are not computed on the device: the input is returned, the constant is
  returned and given to the backward graph as a constant (the lowering needs the mask known);
- the forward saves `log_softmax(z)` for the backward of the loss; the forward's `cross_entropy`
  kernel does not materialise it, so the forward saves the logits z instead (legalise_training's rule
  for a backward graph alone takes either: softmax(log_softmax(z)) = softmax(z)), and NLL's
  `total_weight`, which `cross_entropy_backward` does not read (it counts the targets itself), is a
  host zero; so are layer norm's saved mean and rstd (`layer_norm_backward` recomputes them from x), and
  max pooling's indices (`pool2d_backward` finds each window's maximum again from x).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from trnlab.compiler import dynamo
from trnlab.compiler.errors import CompileError
from trnlab.compiler.ops import to_numpy, to_torch
from trnlab.training import capture as capture_mod
from trnlab.training import lower as lower_mod
from trnlab.training.step import _as_int32, run_calls


def _aten(node: torch.fx.Node, name: str) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") in (name, f"{name}.default")


def _through_alias(node):
    while isinstance(node, torch.fx.Node) and _aten(node, "alias"):
        node = node.args[0]
    return node


def save_logits_not_log_probs(fx_gm: torch.fx.GraphModule, user_outputs: int = 0) -> dict:
    """Rewrite a forward graph's outputs: log_softmax(z) (or an alias of it) -> z; NLL's total_weight and
    layer norm's mean and rstd (read by no backward kernel) -> marked for a host zero. Only the saved
    tensors change (after the first `user_outputs`, which the model returns). Returns {output position:
    its fake tensor} for the host-made outputs."""
    import operator
    out = [n for n in fx_gm.graph.nodes if n.op == "output"][0]
    outs = list(out.args[0])
    host = {}
    for i, o in enumerate(outs):
        if i < user_outputs:
            continue
        src = _through_alias(o)
        if isinstance(src, torch.fx.Node) and _aten(src, "_log_softmax"):
            outs[i] = src.args[0]
        elif isinstance(o, torch.fx.Node) and o.op == "call_function" and o.target is operator.getitem and (
                (_aten(o.args[0], "nll_loss_forward") and o.args[1] == 1)
                or (_aten(o.args[0], "native_layer_norm") and o.args[1] in (1, 2))
                or (_aten(o.args[0], "max_pool2d_with_indices") and o.args[1] == 1)):   # pool2d_backward
            host[i] = o.meta["val"]                                                       # finds the max again
        elif isinstance(o, torch.fx.Node) and o.op == "call_function" and o.target is operator.getitem and (
                _aten(o.args[0], "_native_batch_norm_legit_functional") and o.args[1] in (3, 4)):
            host[i] = running_statistic(o, outs)          # the new running mean / var, made after the step
    out.args = (tuple(outs),)
    fx_gm.graph.eliminate_dead_code()
    fx_gm.recompile()
    return host


@dataclass
class RunningStatistic:
    """A batch norm's new running mean or variance (an AOT forward output that updates a buffer): made on
    the host after the step from the buffer's current value and the batch's saved mean and rstd, as
    PyTorch does: (1 - momentum) * running + momentum * batch (the variance unbiased, n / (n - 1))."""
    buffer: str                          # the FX placeholder of the running buffer
    mean_output: int                     # FX output positions of the batch's mean and rstd
    rstd_output: int
    momentum: float
    eps: float
    count: int                           # values per channel in the batch
    variance: bool
    shape: tuple = ()
    dtype: object = None


def running_statistic(o: torch.fx.Node, outs: list) -> RunningStatistic:
    bn = o.args[0]
    x, _, _, running_mean, running_var, _, momentum, eps = bn.args[:8]
    position = {(n.args[0], n.args[1]): i for i, n in enumerate(outs)
                if isinstance(n, torch.fx.Node) and n.op == "call_function" and len(n.args) == 2}
    if (bn, 1) not in position or (bn, 2) not in position:
        raise CompileError("batch norm in training: the forward does not save the batch's mean and rstd, "
                           "which its running statistics are made from", op="batch_norm")
    shape = x.meta["val"].shape
    count = int(shape[0]) * int(torch.tensor(shape[2:]).prod()) if len(shape) > 2 else int(shape[0])
    val = o.meta["val"]
    return RunningStatistic((running_mean if o.args[1] == 3 else running_var).name, position[(bn, 1)],
                            position[(bn, 2)], float(momentum), float(eps), count, o.args[1] == 4,
                            tuple(val.shape), val.dtype)


@dataclass
class PhaseProgram:
    """One of AOT Autograd's graphs on the device: `program(*tensors) -> [tensors]` as AOT calls it."""
    phase: str                          # "forward" | "backward"
    graph: object                       # the IR graph after the passes and rewrites
    calls: list                         # the lowered StepCalls
    input_names: list                   # the program's inputs: constants, then the graph's inputs
    constants: dict
    outputs: list                       # per FX output: ("device", k) | ("input", i) | ("const", name) | ("host", val)
    target: str = "trn2"
    program: object = None
    times: dict = field(default_factory=dict)
    last_run: object = None             # the last launch (trnlab.hardware Run: outputs, latency_ns, profile)
    output_meta: list = field(default_factory=list)       # each FX output's fake tensor (shape, dtype) or None
    saved_constants: dict = field(default_factory=dict)   # forward: saved tensor name -> constant for the backward
    _user_positions: list = field(default_factory=list)   # which of AOT's arguments are the program's inputs
    steps: int = 0                      # calls so far (the dropout seed advances by one per step)
    _placeholders: list = field(default_factory=list)     # the FX graph's placeholder names, in order

    def listing(self) -> str:
        lines = [f"{self.phase} graph for {self.target}: {sum(c.kind == 'kernel' for c in self.calls)} kernel calls"]
        lines += [f"  {c.region:34s} {c.describe()}" for c in self.calls]
        return "\n".join(lines)

    def _function(self, device_outputs: list):
        names, calls = self.input_names, self.calls

        def phase_program(*arrays):
            values = run_calls(calls, dict(zip(names, arrays)))
            return tuple(values[o] for o in device_outputs)

        return phase_program

    def __call__(self, *args):
        import trnlab.nki as nki
        from trnlab.hardware.device import Device
        args = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        user = [_as_int32(to_numpy(a.detach() if isinstance(a, torch.Tensor) else torch.as_tensor(a)))
                for a in args]
        if "dropout_seed" in self.constants:         # a new dropout mask every step, reproducible from the first
            self.constants["dropout_seed"] = self.constants["dropout_seed"] + np.int32(self.steps > 0)
        self.steps += 1
        arrays = list(self.constants.values()) + [user[i] for i in self._user_positions]
        device_outputs = [self.graph.outputs[k] for kind, k in self.outputs if kind == "device"]
        if self.program is None:
            t0 = time.perf_counter()
            self.program = nki.trace(self._function(device_outputs), *arrays, target=self.target)
            self.times["trace"] = time.perf_counter() - t0
        run = Device(self.target, mode="full", cores=1).run(self.program, *arrays, region=self.phase)
        self.last_run = run
        results = iter(run.outputs)
        out = []
        for (kind, k), meta in zip(self.outputs, self.output_meta):
            if kind == "device":                  # in the FX output's shape and dtype (a loss is [], not [1])
                out.append(to_torch(np.asarray(next(results))).reshape(meta.shape).to(meta.dtype))
            elif kind == "input":
                out.append(args[k])
            elif kind == "const":                 # in the FX output's shape and dtype too (a counter is [])
                value = to_torch(np.array(self.graph.constants[k]))
                out.append(value.reshape(meta.shape).to(meta.dtype) if meta is not None else value)
            elif kind == "none":
                out.append(None)
            elif isinstance(k, RunningStatistic):
                out.append(None)                     # filled below, once the batch's statistics are known
            else:
                out.append(torch.zeros(k.shape, dtype=k.dtype))
        for i, ((kind, k), o) in enumerate(zip(self.outputs, list(out))):
            if kind == "host" and isinstance(k, RunningStatistic):
                current = args[self._placeholders.index(k.buffer)]
                batch = out[k.mean_output] if not k.variance else \
                    (1.0 / out[k.rstd_output] ** 2 - k.eps) * k.count / max(k.count - 1, 1)
                out[i] = ((1 - k.momentum) * current + k.momentum * batch).to(k.dtype).reshape(k.shape)
        return out


def compile_phase(fx_gm: torch.fx.GraphModule, phase: str, constants: dict, target: str = "trn2",
                  name: str = "graph", user_outputs: int = 0) -> PhaseProgram:
    """Compile one of AOT Autograd's graphs. `constants`: FX placeholder name -> tensor for the inputs that
    are constants of the program (buffers; the saved tensors the forward computed from constants).
    `user_outputs`: how many of a forward graph's outputs the model returns (the rest are saved tensors)."""
    from trnlab.compiler import capture
    t0 = time.perf_counter()
    host = save_logits_not_log_probs(fx_gm, user_outputs) if phase == "forward" else {}
    placeholders = [n.name for n in fx_gm.graph.nodes if n.op == "placeholder"]
    spec = {p: ("const", constants[p], p) if p in constants else ("input", None) for p in placeholders}
    g = capture.from_fx(fx_gm, spec, name=f"{name}_{phase}")
    fx_outputs = list([n for n in fx_gm.graph.nodes if n.op == "output"][0].args[0])
    tensors = [i for i, o in enumerate(fx_outputs) if isinstance(o, torch.fx.Node)]   # None: no gradient
    if len(g.outputs) != len(tensors):
        raise CompileError(f"{phase} graph: {len(tensors)} tensor outputs in FX, {len(g.outputs)} after capture",
                           op=phase)
    by_position = dict(zip(tensors, g.outputs))
    kept = [i for i in tensors if i not in host]                   # device outputs, by FX position
    g.outputs = [by_position[i] for i in kept]
    g = lower_mod.prepare(g)
    outputs, position = [], {i: j for j, i in enumerate(kept)}
    for i in range(len(fx_outputs)):
        if i in host:
            outputs.append(("host", host[i]))
            continue
        if i not in position:
            outputs.append(("none", None))
            continue
        o = g.outputs[position[i]]
        kind = g.values[o].kind
        if kind == "input":
            outputs.append(("input", placeholders.index(o)))
        elif kind in ("const", "param"):
            outputs.append(("const", o))
        else:
            outputs.append(("device", position[i]))
    calls, extra = lower_mod.lower_step(g, None, phase=phase)
    consts = {k: _as_int32(np.ascontiguousarray(v)) for k, v in g.constants.items()}
    consts.update(extra)
    inputs = [i for i in g.inputs]
    prog = PhaseProgram(phase, g, calls, list(consts) + inputs, consts, outputs, target)
    prog.output_meta = [o.meta["val"] if isinstance(o, torch.fx.Node) else None for o in fx_outputs]
    prog._user_positions = [placeholders.index(i) for i in inputs]
    prog._placeholders = placeholders
    # what the backward graph takes as constants: the saved tensors the forward made of constants alone
    prog.saved_constants = {fx_outputs[i].name: to_torch(np.array(g.constants[k]))
                            for i, (kind, k) in enumerate(outputs) if kind == "const"}
    prog.times["compile"] = time.perf_counter() - t0
    return prog


def _per_group(x: torch.Tensor, groups: int) -> list:
    """x's channels (dim 1 of an activation, dim 0 of a weight: pass x.transpose) in `groups` equal slices."""
    return list(torch.chunk(x, groups, dim=1))


def _grouped_convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    """convolution(groups=G) -> G convolutions of groups=1 on the channel slices, joined by cat (dim 1):
    each is then the im2col matmul of the training lowering (forward) and its adjoints (backward)."""
    if groups == 1 or transposed:
        return NotImplemented
    biases = list(torch.chunk(bias, groups)) if bias is not None else [None] * groups
    parts = [torch.ops.aten.convolution.default(xg, wg, bg, stride, padding, dilation, False, output_padding, 1)
             for xg, wg, bg in zip(_per_group(x, groups), torch.chunk(w, groups), biases)]
    return torch.cat(parts, dim=1)


def _grouped_convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                                  groups, output_mask):
    """convolution_backward(groups=G) -> G backward convolutions of groups=1 (group g's dx and dw read only
    its slices of dy, x and w), dx joined on the channels (dim 1), dw on the output channels (dim 0)."""
    if groups == 1 or transposed:
        return NotImplemented
    parts = [torch.ops.aten.convolution_backward.default(
        dyg, xg, wg, None, stride, padding, dilation, False, output_padding, 1, [output_mask[0], output_mask[1], False])
        for dyg, xg, wg in zip(_per_group(dy, groups), _per_group(x, groups), torch.chunk(w, groups))]
    dx = torch.cat([p[0] for p in parts], dim=1) if output_mask[0] else None
    dw = torch.cat([p[1] for p in parts], dim=0) if output_mask[1] else None
    db = dy.sum(dim=[0, *range(2, dy.dim())]) if output_mask[2] else None
    return dx, dw, db


def decompositions() -> dict:
    """The training step's decomposition table (core ATen minus the ops with kernels of their own), and a
    grouped convolution (depthwise included) as one ordinary convolution per group, forward and backward."""
    table = capture_mod.decompositions()
    table[torch.ops.aten.convolution.default] = _grouped_convolution
    table[torch.ops.aten.convolution_backward.default] = _grouped_convolution_backward
    return table


def dynamo_backend(gm, example_inputs, names: list, options: dict):
    """`torch.compile(backend="trnlab")` when an input needs gradients (compiler/dynamo.py hands it
    here): forward and backward through the training lowering: parameters are runtime
    inputs (the optimizer changes them), buffers constants; the backward graph takes the forward's
    saved tensors."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    defaults = {"autocast": "none", "fallback": False}
    unknown = {k for k, v in options.items() if k != "target" and defaults.get(k, object()) != v}
    if unknown:
        raise CompileError(f"training through torch.compile(backend='trnlab'): options {sorted(unknown)} are not "
                           f"supported (only target=); autocast and fallback are inference-only here", op="options")
    target = options.get("target", "trn2")
    buffers = {i: x for i, (n, x) in enumerate(zip(names, example_inputs)) if "_buffers_" in n}
    shared: dict = {}
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    user_outputs = len(out) if isinstance(out, (tuple, list)) else 1

    def fw_compiler(fw_gm, fw_inputs):
        with unset_fake_temporarily():
            fw_names = [n.name for n in fw_gm.graph.nodes if n.op == "placeholder"]
            constants = {fw_names[i]: x for i, x in buffers.items()}
            # AOT's forward returns the model's outputs first (no input is mutated here), then the saved tensors
            program = compile_phase(fw_gm, "forward", constants, target, name=type(gm).__name__,
                                        user_outputs=user_outputs)
        shared["forward"] = program
        dynamo.backend.last_training = shared
        return _boxed(program)

    def bw_compiler(bw_gm, bw_inputs):
        with unset_fake_temporarily():
            saved = shared["forward"].saved_constants
            bw_names = [n.name for n in bw_gm.graph.nodes if n.op == "placeholder"]
            program = compile_phase(bw_gm, "backward", {n: saved[n] for n in bw_names if n in saved}, target,
                                        name=type(gm).__name__)
        shared["backward"] = program
        return _boxed(program)

    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                        decompositions=decompositions())(gm, example_inputs)


def _boxed(program):
    from functorch.compile import make_boxed_func

    def run(args):
        out = program(list(args))
        args.clear()
        return out

    run._boxed_call = True
    run.program = program
    return run


dynamo.use_training(dynamo_backend)
