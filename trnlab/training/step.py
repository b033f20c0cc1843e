"""A compiled training step of a model on the simulated Trainium: forward, backward and AdamW as ONE
program, traced once and replayed step after step.

    step = compile_train_step(model, (idx, targets), target="trn2", autocast="none",
                              optimizer=AdamWConfig(lr=3e-3, weight_decay=0.1))
    result = step(idx, targets)          # one step on the device: result.loss, result.profile
    step.parameters()                    # the trained weights, {name: torch tensor}
    step.state_dict() / step.load_state_dict(...)

The chain: AOT Autograd's joint graph (capture.py) -> legalise + legalise_training + fold (the
compiler's passes) -> the training lowering (lower.py) -> one Python function that calls every kernel
in a region ("forward/matmul.3", "backward/...", "optimizer/adamw.<param>") -> `nki.trace` (one
program, cached) -> `Device.run` per step. Parameters and the two AdamW moments are the program's
inputs and outputs: they stay in the device's HBM between steps on a real chip; here they come
back as arrays (no time is charged for that).

The only numbers that change between steps — the learning rate and the bias corrections — are a
[3] input (`adamw.hyper_values`), so the same program serves every step (one NEFF).
"""
from __future__ import annotations

import importlib
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from trnlab.compiler.ops import to_numpy, to_torch
from trnlab.training import capture as capture_mod
from trnlab.training import lower as lower_mod

PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class AdamWConfig:
    """torch.optim.AdamW's hyper-parameters; weight decay on matrices only (as GPT.configure_optimizer)."""
    lr: float = 3e-3
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    decay_matrices_only: bool = True

    def decays(self, param: torch.Tensor) -> float:
        return self.weight_decay if (param.dim() >= 2 or not self.decay_matrices_only) else 0.0

    def torch_optimizer(self, model: torch.nn.Module) -> torch.optim.AdamW:
        """The PyTorch optimizer this configuration stands for (the reference the tests compare with)."""
        params = list(dict.fromkeys(model.parameters()))
        decay = [p for p in params if self.decays(p)]
        rest = [p for p in params if not self.decays(p)]
        groups = [{"params": decay, "weight_decay": self.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=self.lr, betas=tuple(self.betas), eps=self.eps)


@dataclass
class StepProfile:
    """The simulated cost of one step, from the program's regions."""
    target: str
    total_ns: float
    phase_ns: dict                       # forward / backward / optimizer -> ns each adds to the step
    flops: float                         # Tensor-engine FLOPs of the step, nc_transpose excluded
    flops_by_phase: dict
    peak_flops: float                    # of the matmul dtype
    profile: object                      # trnlab.hardware.Profile of the whole launch
    regions: dict = field(default_factory=dict)   # region -> ns (span)
    wall_s: float = 0.0
    timeline: object = None              # the launch's records (trnlab.hardware.Timeline)
    phases: list = field(default_factory=list)     # the phase of each record of `timeline`
    launch_ns: float = 0.0               # the runtime's start-up and tear-down (CoreSpec.launch_ns):
                                         # with the phases, the step's time

    @property
    def total_us(self) -> float:
        return self.total_ns / 1e3

    @property
    def mfu(self) -> float:
        """Model FLOPs over what the Tensor engine could do in the step's time."""
        return self.flops / (self.total_ns * 1e-9 * self.peak_flops) if self.total_ns else 0.0

    @property
    def shares(self) -> dict:
        total = sum(self.phase_ns.values()) or 1.0
        return {k: v / total for k, v in self.phase_ns.items()}

    def summary(self) -> str:
        parts = "  ".join(f"{k} {v / 1e3:.1f} us ({self.shares[k]:.0%})" for k, v in self.phase_ns.items())
        launch = f"  runtime start-up {self.launch_ns / 1e3:.1f} us" if self.launch_ns else ""
        return (f"{self.target}: {self.total_us:.1f} us per step, {self.flops / 1e6:.2f} MFLOP, "
                f"MFU {self.mfu:.2%}   {parts}{launch}")


@dataclass
class StepResult:
    loss: float
    profile: StepProfile
    grads: dict                          # parameter name -> np.ndarray (before the update)


def _kernel(path: str):
    module, name = path.split(".")
    return getattr(importlib.import_module(f"trnlab.kernels.{module}"), name)


def _shaped(x, shape):
    return x if shape is None or tuple(x.shape) == tuple(shape) else x.reshape(shape)


def run_calls(calls: list, values: dict) -> dict:
    """Call every kernel of a lowered graph (inside `nki.trace`), each in its region; `values` maps value
    names to arrays and receives every output."""
    import trnlab.nki as nki
    for call in calls:
        if call.kind == "view":
            values[call.outputs[0]] = _shaped(values[call.inputs[0]], call.out_shapes[0])
            continue
        args = [None if i is None else _shaped(values[i], s) for i, s in zip(call.inputs, call.views)]
        with nki.region(call.region):
            out = _kernel(call.kernel)(*args, **call.kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        for name, shape, o in zip(call.outputs, call.out_shapes, outs):
            if name is not None:
                values[name] = _shaped(o, shape)
    return values


def _param_view(shape) -> tuple:
    """The 2-D shape AdamW sees a parameter as: [128, n / 128] when 128 divides n (every partition
    works), else its rows ([R, C]) or one row."""
    n = math.prod(shape)
    if n % 128 == 0 and n >= 128:
        return (128, n // 128)
    return tuple(lower_mod._rows(shape))


def _as_int32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int32) if x.dtype == np.int64 else x


class TrainStep:
    """The compiled step of one model and batch shape; holds the parameters and the optimizer state."""

    def __init__(self, model: torch.nn.Module, example_batch: tuple, target: str = "trn2",
                 autocast: str = "none", optimizer: AdamWConfig = AdamWConfig()):
        if autocast not in ("none", "matmult"):
            raise ValueError(f"autocast {autocast!r}: training supports 'none' and 'matmult' (bf16 matmuls, fp32 "
                             f"master weights, gradients and optimizer state)")
        self.target, self.autocast, self.optimizer = target, autocast, optimizer
        self.times: dict = {}
        t0 = time.perf_counter()
        idx, targets = example_batch
        self.joint = joint = capture_mod.capture_joint(model, idx, targets)
        self.times["capture (AOT Autograd)"] = joint.seconds
        t0 = time.perf_counter()
        g = joint.graph.copy()
        g = lower_mod.prepare(g)
        if autocast == "matmult":
            lower_mod.autocast_matmuls(g)
        self.graph = g
        self.times["passes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.loss_value = g.outputs[joint.loss]
        self.grad_values = {n: [g.outputs[i] for i in idxs] for n, idxs in joint.grads.items()}
        self.calls, extra = lower_mod.lower_step(g, self.loss_value)
        self.constants = {k: _as_int32(np.ascontiguousarray(v)) for k, v in g.constants.items()}
        self.constants.update(extra)
        self.times["lower"] = time.perf_counter() - t0
        named = dict(model.named_parameters())
        self.names = list(joint.param_names)
        self.params = {n: to_numpy(named[n].detach()).astype(np.float32).copy() for n in self.names}
        self.decay = {n: optimizer.decays(named[n]) for n in self.names}
        self.exp_avg = {n: np.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: np.zeros_like(p) for n, p in self.params.items()}
        self.step_count = 0
        self.batch_shape = (tuple(idx.shape), tuple(targets.shape))
        self.program = None
        self._device = None
        self.last: StepResult | None = None

    # -- the program --------------------------------------------------------------------------------------
    def _input_names(self) -> list:
        params = [i for n in self.names for i in self.joint.param_inputs[n]]
        return list(self.constants) + params + list(self.joint.batch_inputs) + \
            [f"exp_avg.{n}" for n in self.names] + [f"exp_avg_sq.{n}" for n in self.names] + ["hyper"]

    def _step_function(self, placement: dict | None = None):
        """The traced step. `placement` maps a parameter to the call index after which its AdamW update
        is issued (`overlap.py`); by default every update follows the whole backward, in `names` order."""
        import trnlab.nki as nki
        from trnlab.kernels.adamw import adamw
        from trnlab.kernels.elementwise import add
        names = self._input_names()
        calls, joint, opt = self.calls, self.joint, self.optimizer
        last = len(calls) - 1
        after: dict = {}
        for n in self.names:
            i = last if placement is None else placement[n]
            while i < last and calls[i + 1].kind == "view":      # the call's outputs as the graph names them
                i += 1
            after.setdefault(i, []).append(n)

        shaped = _shaped

        def update(values: dict, n: str) -> tuple:
            view = _param_view(self.params[n].shape)
            parts = [shaped(values[gname], view) for gname in self.grad_values[n]]
            grad = parts[0]
            for k, extra in enumerate(parts[1:]):            # a tied weight: its gradients meet
                with nki.region(f"backward/tied_grad.{n}.{k}"):
                    grad = add(grad, extra)
            with nki.region(f"optimizer/adamw.{n}"):
                p, m, v = adamw(shaped(values[joint.param_inputs[n][0]], view), grad,
                                shaped(values[f"exp_avg.{n}"], view), shaped(values[f"exp_avg_sq.{n}"], view),
                                values["hyper"], beta1=float(opt.betas[0]), beta2=float(opt.betas[1]),
                                eps=float(opt.eps), weight_decay=float(self.decay[n]))
            return p, m, v, grad

        def train_step(*arrays):
            values = dict(zip(names, arrays))
            done = {}
            if placement is None:
                run_calls(calls, values)
            for i, call in enumerate(calls):
                if placement is not None:
                    run_calls([call], values)
                for n in after.get(i, ()):
                    done[n] = update(values, n)
            new_params, new_m, new_v, grads = ([done[n][k] for n in self.names] for k in range(4))
            return (shaped(values[self.loss_value], (1,)), *new_params, *new_m, *new_v, *grads)

        return train_step

    def _arguments(self, idx, targets, lr: float) -> list:
        from trnlab.kernels.adamw import hyper_values
        args = list(self.constants.values())
        for n in self.names:
            args += [self.params[n]] * len(self.joint.param_inputs[n])
        args += [_as_int32(to_numpy(torch.as_tensor(idx))), _as_int32(to_numpy(torch.as_tensor(targets)))]
        args += [self.exp_avg[n].reshape(_param_view(self.params[n].shape)) for n in self.names]
        args += [self.exp_avg_sq[n].reshape(_param_view(self.params[n].shape)) for n in self.names]
        b1, b2 = self.optimizer.betas
        args.append(np.asarray(hyper_values(lr, self.step_count + 1, b1, b2), np.float32))
        return args

    def trace(self, idx=None, targets=None):
        """The step's program (traced on the first call, then cached)."""
        import trnlab.nki as nki
        if self.program is None:
            if idx is None:
                idx = np.zeros(self.batch_shape[0], np.int64)
                targets = np.zeros(self.batch_shape[1], np.int64)
            t0 = time.perf_counter()
            self.program = nki.trace(self._step_function(), *self._arguments(idx, targets, self.optimizer.lr),
                                     target=self.target)
            self.times["trace"] = time.perf_counter() - t0
        return self.program

    def simulate(self, target: str | None = None, placement: dict | None = None) -> StepProfile:
        """The simulated cost of one step on `target` (default: the step's own) in timing-only mode: the
        same program traced for that generation's core, costed without computing values (fast, for
        large batches); the parameters and optimizer state do not change. `placement`: where each
        AdamW update is issued ({parameter: call index}, `overlap.py`); None: after the backward."""
        import trnlab.nki as nki
        from trnlab.hardware.device import Device
        target = target or self.target
        args = self._arguments(np.zeros(self.batch_shape[0], np.int64), np.zeros(self.batch_shape[1], np.int64),
                               self.optimizer.lr)
        t0 = time.perf_counter()
        program = self.program if target == self.target and self.program is not None and placement is None \
            else nki.trace(self._step_function(placement), *args, target=target)
        run = Device(target, mode="timing", cores=1).run(program, *args, region="step")
        profile = self._profile(run, time.perf_counter() - t0)
        profile.target = target
        return profile

    # -- running ------------------------------------------------------------------------------------------
    def __call__(self, idx, targets, lr: float | None = None) -> StepResult:
        from trnlab.hardware.device import Device
        if (tuple(idx.shape), tuple(targets.shape)) != self.batch_shape:
            raise ValueError(f"batch shape: the step was compiled for idx {self.batch_shape[0]} and targets "
                             f"{self.batch_shape[1]}, called with {tuple(idx.shape)} and {tuple(targets.shape)}; "
                             f"compile one step per batch shape")
        lr = self.optimizer.lr if lr is None else float(lr)
        program = self.trace(idx, targets)
        if self._device is None:
            self._device = Device(self.target, mode="full", cores=1)
        t0 = time.perf_counter()
        run = self._device.run(program, *self._arguments(idx, targets, lr), region=f"step{self.step_count}")
        wall = time.perf_counter() - t0
        outs = list(run.outputs)
        loss = float(np.asarray(outs[0]).reshape(-1)[0])
        k = len(self.names)
        grads = {}
        for i, n in enumerate(self.names):
            shape = self.params[n].shape
            self.params[n] = np.asarray(outs[1 + i]).reshape(shape)
            self.exp_avg[n] = np.asarray(outs[1 + k + i]).reshape(shape)
            self.exp_avg_sq[n] = np.asarray(outs[1 + 2 * k + i]).reshape(shape)
            grads[n] = np.asarray(outs[1 + 3 * k + i]).reshape(shape)
        self.step_count += 1
        self.last = StepResult(loss, self._profile(run, wall), grads)
        self._trim()
        return self.last

    def _trim(self) -> None:
        """Keep the device's timeline to the last launch (a long run would otherwise grow it forever)."""
        core = self._device.cores[0]
        if len(core.timeline.records) > 2_000_000:
            from trnlab.hardware.device import Device
            self._device = Device(self.target, mode="full", cores=1)

    def _profile(self, run, wall: float) -> StepProfile:
        from trnlab.hardware.timeline import ENGINE, END, FLOPS, OPCODE, START
        core = run.core
        timeline = core.timeline
        dtype = "bfloat16" if self.autocast == "matmult" else "float32"
        profile = run.profile(dtype=dtype)
        prefix = run.region + "/"
        regions, phase_ns, flops_by_phase = {}, {p: 0.0 for p in PHASES}, {p: 0.0 for p in PHASES}
        spans: dict = {}
        records = timeline.records
        phases = [""] * (run.end - run.first)
        for name, first, end in timeline.regions:
            if first < run.first or end > run.end or not name.startswith(prefix):
                continue
            label = name[len(prefix):]
            phase = label.split("/")[0]
            for i in range(first, end):
                phases[i - run.first] = phase
                r = records[i]
                s = spans.setdefault(label, [math.inf, -math.inf, phase, 0.0])
                s[0], s[1] = min(s[0], r[START]), max(s[1], r[END])
                if r[OPCODE] != "nc_transpose":
                    s[3] += r[FLOPS]
        for label, (start, stop, phase, flops) in spans.items():
            if phase not in phase_ns:
                continue
            regions[label] = stop - start
            flops_by_phase[phase] += flops
        # a phase's time: how far it moves the step's end past the phases before it (its own span would
        # count the overlap twice: the backward's loads start while the forward still computes), so the
        # three and the runtime's start-up and tear-down add up to the step's time
        reached = min((s[0] for s in spans.values()), default=0.0)     # the launch's start on the core
        for phase in PHASES:
            stops = [s[1] for lbl, s in spans.items() if s[2] == phase]
            end = max(stops) if stops else reached
            phase_ns[phase] = max(end - reached, 0.0)
            reached = max(reached, end)
        del ENGINE
        return StepProfile(self.target, run.latency_ns, phase_ns, sum(flops_by_phase.values()), flops_by_phase,
                           profile.peak_flops, profile, regions, wall, run.timeline, phases,
                           launch_ns=core.spec.launch_ns)

    # -- state ----------------------------------------------------------------------------------------------
    def parameters(self) -> dict:
        """{name: torch tensor} of the current weights."""
        return {n: to_torch(p.copy()) for n, p in self.params.items()}

    def load_into(self, model: torch.nn.Module) -> torch.nn.Module:
        """Copy the current weights into `model` (same architecture) and return it."""
        named = dict(model.named_parameters())
        with torch.no_grad():
            for n, p in self.params.items():
                named[n].copy_(torch.from_numpy(p.copy()))
        return model

    def state_dict(self) -> dict:
        """Everything a resumed run needs: weights, both moments, the step count, the configuration."""
        tensors = {}
        for n in self.names:
            tensors[f"param.{n}"] = self.params[n]
            tensors[f"exp_avg.{n}"] = self.exp_avg[n]
            tensors[f"exp_avg_sq.{n}"] = self.exp_avg_sq[n]
        meta = {"step": self.step_count, "target": self.target, "autocast": self.autocast,
                "optimizer": asdict(self.optimizer), "batch_shape": [list(s) for s in self.batch_shape],
                "names": self.names}
        return {"tensors": tensors, "meta": meta}

    def load_state_dict(self, state: dict) -> None:
        tensors, meta = state["tensors"], state["meta"]
        if meta["names"] != self.names:
            raise ValueError(f"checkpoint: its parameters {meta['names'][:3]}... are not this step's "
                             f"{self.names[:3]}...")
        for n in self.names:
            for store, key in ((self.params, "param"), (self.exp_avg, "exp_avg"), (self.exp_avg_sq, "exp_avg_sq")):
                value = np.asarray(tensors[f"{key}.{n}"], np.float32)
                if value.shape != self.params[n].shape:
                    raise ValueError(f"checkpoint: {key}.{n} has shape {value.shape}, the model's is "
                                     f"{self.params[n].shape}")
                store[n] = value.copy()
        self.step_count = int(meta["step"])

    def listing(self) -> str:
        """The lowered step: one line per kernel call or view, by phase."""
        lines = [f"training step for {self.target} (autocast={self.autocast}): "
                 f"{sum(c.kind == 'kernel' for c in self.calls)} kernel calls, "
                 f"{sum(c.kind == 'view' for c in self.calls)} views, {len(self.names)} AdamW updates"]
        for c in self.calls:
            lines.append(f"  {c.region:34s} {c.describe()}")
        return "\n".join(lines)


def compile_train_step(model: torch.nn.Module, example_batch: tuple, target: str = "trn2", autocast: str = "none",
                       optimizer: AdamWConfig = AdamWConfig()) -> TrainStep:
    """Compile forward + backward + AdamW of `model(idx, targets)[1]` for the batch's shapes."""
    return TrainStep(model, example_batch, target, autocast, optimizer)
