"""The same model's training step and decode step on Trn1, Trn2 and Trn3, from simulated timelines.

Peak figures say what a chip could do; the simulator says what this model's kernels actually take.
`training_step_calls` lists the kernel calls of one forward + backward pass of a GPT (the kernels of
`trnlab.kernels`, at the shapes `trnlab.model.gpt` uses, built as `trnlab.kernels.workload` builds
them); `decode_step_calls` those of one decode step. `simulate_step` runs each distinct call once on
one simulated NeuronCore in timing-only mode (no values computed, so it takes a fraction of a second
for the tiny GPT) and adds the latencies up, kernel after kernel.

What is and is not in the numbers:
- one NeuronCore runs the step; a chip runs `cores` such steps side by side (data parallelism
  across its cores, gradient all-reduce left out — notebook 08 prices it);
- kernels run one after another (no overlap between kernels, as without a fusing compiler);
- the training step is forward + backward: the AdamW update (the `trnlab.kernels.adamw` kernel, in
  the compiled step of notebook 07) is left out of this sum;
- decode attention over the KV cache is the roofline's estimate (max of compute time and cache-read
  time on one core, marked `roofline=True`), not the `trnlab.kernels.decode_attention` kernel that
  the compiled decode step of notebook 09 runs.
So these are per-kernel sums for comparing generations, not the compiled steps' times: those overlap
kernels, include the optimizer, and run the shapes notebooks 07 and 09 give them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trnlab.nki as nki
from trnlab.economics.fit import decode_ops, forward_ops
from trnlab.hardware import presets
from trnlab.model.gpt import GPTConfig


@dataclass(frozen=True)
class KernelCall:
    """One call of a library kernel: the kernel's name, a label, its arguments and how often it runs."""

    kernel: str
    label: str
    args: tuple
    kwargs: tuple = ()          # (name, value) pairs
    count: int = 1

    def key(self) -> tuple:
        shapes = tuple((a.shape, str(a.dtype)) if isinstance(a, nki.ShapeDtype) else a for a in self.args)
        return self.kernel, shapes, self.kwargs


def _t(*shape, dtype="bfloat16"):
    return nki.ShapeDtype(shape, dtype)


def training_step_calls(config: GPTConfig, batch: int, seq_len: int | None = None,
                        dtype: str = "bfloat16") -> list[KernelCall]:
    """Kernel calls of one forward + backward pass over `batch` sequences of `seq_len` tokens."""
    T = config.block_size if seq_len is None else seq_len
    C, V, nh, L = config.n_embd, config.vocab_size, config.n_head, config.n_layer
    R = batch * T

    def t(*shape, dt=dtype):
        return _t(*shape, dtype=dt)

    x, row, ids = t(R, C), t(C), t(R, dt="int32")
    qkv, y = t(batch, T, 3 * C), t(batch, T, C)
    lse = t(batch, nh, T, dt="float32")
    logits = t(R, V, dt="float32")
    head = (("weight_layout", "out_in"),)
    forward = [
        KernelCall("embedding", "token embedding", (ids, t(V, C))),
        KernelCall("add", "+ position embedding", (x, x)),
        KernelCall("layer_norm", "ln_1", (x, row, row), count=L),
        KernelCall("linear", "attn.qkv", (x, t(C, 3 * C), t(3 * C)), count=L),
        KernelCall("causal_attention_qkv", "attention", (qkv, nh), count=L),
        KernelCall("linear", "attn.proj", (x, t(C, C), t(C)), count=L),
        KernelCall("add", "residual", (x, x), count=2 * L),
        KernelCall("layer_norm", "ln_2", (x, row, row), count=L),
        KernelCall("linear", "mlp.fc + gelu", (x, t(C, 4 * C), t(4 * C), "gelu"), count=L),
        KernelCall("linear", "mlp.proj", (t(R, 4 * C), t(4 * C, C), t(C)), count=L),
        KernelCall("layer_norm", "ln_f", (x, row, row)),
        KernelCall("linear", "lm_head", (x, t(V, C)), head),
        KernelCall("cross_entropy", "loss", (logits, ids)),
    ]
    backward = [
        KernelCall("cross_entropy_backward", "loss backward", (logits, ids)),
        KernelCall("linear_backward", "lm_head backward", (x, t(V, C), t(R, V)), head),
        KernelCall("layer_norm_backward", "ln_f backward", (x, row, x)),
        KernelCall("linear_backward", "mlp.proj backward", (t(R, 4 * C), t(4 * C, C), x), count=L),
        KernelCall("gelu_backward", "gelu backward", (t(R, 4 * C), t(R, 4 * C)), count=L),
        KernelCall("linear_backward", "mlp.fc backward", (x, t(C, 4 * C), t(R, 4 * C)), count=L),
        KernelCall("layer_norm_backward", "ln backward", (x, row, x), count=2 * L),
        KernelCall("add", "residual gradients meet", (x, x), count=2 * L),
        KernelCall("linear_backward", "attn.proj backward", (x, t(C, C), x), count=L),
        KernelCall("causal_attention_qkv_backward", "attention backward", (qkv, y, y, lse, nh), count=L),
        KernelCall("linear_backward", "attn.qkv backward", (x, t(C, 3 * C), t(R, 3 * C)), count=L),
        KernelCall("embedding_backward", "embedding backward", (ids, x, V)),
    ]
    return forward + backward


def decode_step_calls(config: GPTConfig, batch: int, dtype: str = "bfloat16") -> list[KernelCall]:
    """Kernel calls of one decode step: `batch` new tokens through every layer (attention excluded)."""
    C, V, L = config.n_embd, config.vocab_size, config.n_layer

    def t(*shape):
        return _t(*shape, dtype=dtype)

    x, row = t(batch, C), t(C)
    return [
        KernelCall("layer_norm", "ln_1", (x, row, row), count=L),
        KernelCall("linear", "attn.qkv", (x, t(C, 3 * C), t(3 * C)), count=L),
        KernelCall("linear", "attn.proj", (x, t(C, C), t(C)), count=L),
        KernelCall("add", "residual", (x, x), count=2 * L),
        KernelCall("layer_norm", "ln_2", (x, row, row), count=L),
        KernelCall("linear", "mlp.fc + gelu", (x, t(C, 4 * C), t(4 * C), "gelu"), count=L),
        KernelCall("linear", "mlp.proj", (t(batch, 4 * C), t(4 * C, C), t(C)), count=L),
        KernelCall("layer_norm", "ln_f", (x, row, row)),
        KernelCall("linear", "lm_head", (x, t(V, C)), (("weight_layout", "out_in"),)),
    ]


@dataclass(frozen=True)
class KernelTime:
    label: str
    kernel: str
    count: int
    latency_us: float       # one call
    flops: float            # one call
    hbm_bytes: float        # one call
    roofline: bool = False  # True: estimated from the roofline, not simulated

    @property
    def total_us(self) -> float:
        return self.count * self.latency_us


@dataclass
class StepTime:
    """One step on one NeuronCore of `target`: every kernel's simulated latency, added up."""

    target: str
    phase: str                      # "train" or "decode"
    tokens: int                     # tokens the step processes
    model_flops: float = 0.0        # the model's matmul FLOPs (what MFU counts), from trnlab.economics.fit
    kernels: list[KernelTime] = field(default_factory=list)

    @property
    def core_us(self) -> float:
        return sum(k.total_us for k in self.kernels)

    @property
    def flops(self) -> float:
        """FLOPs the simulated engines executed (with on-chip transposes and attention recomputation)."""
        return sum(k.count * k.flops for k in self.kernels)

    @property
    def core(self) -> presets.CoreSpec:
        return presets.CORES[self.target]

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the model's FLOPs over (step time × one core's bf16 peak)."""
        return self.model_flops / (self.core_us * 1e-6 * self.core.peak_flops("bfloat16")) if self.core_us else 0.0

    @property
    def hardware_utilisation(self) -> float:
        """Executed FLOPs (transposes and recomputation included) over (step time × peak)."""
        return self.flops / (self.core_us * 1e-6 * self.core.peak_flops("bfloat16")) if self.core_us else 0.0

    @property
    def chip_tokens_per_s(self) -> float:
        """Tokens per second of the whole chip: every core runs its own copy of the step."""
        return presets.CHIPS[self.target].cores * self.tokens / (self.core_us * 1e-6)

    def by_label(self) -> dict[str, float]:
        """Microseconds per label (all calls), in the order the step runs them."""
        out: dict[str, float] = {}
        for k in self.kernels:
            out[k.label] = out.get(k.label, 0.0) + k.total_us
        return out


_CACHE: dict[tuple, tuple[float, float, float]] = {}


def _simulate_call(call: KernelCall, target: str) -> tuple[float, float, float]:
    """(latency µs, FLOPs, HBM bytes) of one call, simulated once per target and shapes."""
    key = (target, call.key())
    if key not in _CACHE:
        from trnlab.kernels import KERNELS
        run = nki.run(KERNELS[call.kernel][0], *call.args, target=target, timing_only=True, **dict(call.kwargs))
        profile = run.profile()
        _CACHE[key] = (run.latency_us, profile.flops, profile.hbm_bytes)
    return _CACHE[key]


def simulate_step(calls: list[KernelCall], target: str, phase: str, tokens: int,
                  model_flops: float = 0.0) -> StepTime:
    step = StepTime(target, phase, tokens, model_flops)
    for call in calls:
        latency, flops, hbm = _simulate_call(call, target)
        step.kernels.append(KernelTime(call.label, call.kernel, call.count, latency, flops, hbm))
    return step


def decode_attention_roofline(config: GPTConfig, batch: int, context: int, target: str,
                              dtype_bytes: int = 2) -> KernelTime:
    """Decode attention over the KV cache on one core, from the roofline (a kernel-free estimate).

    Per layer: q·Kᵀ and p·V, 4·B·nh·ctx·hs FLOPs, reading K and V of every cached position. Like a
    simulated kernel it pays the preset's fixed DMA latency once (its first load) before the roof."""
    core = presets.CORES[target]
    flops = 4.0 * batch * config.n_head * context * config.head_size
    hbm = float(2 * batch * context * config.n_embd * dtype_bytes)
    seconds = core.dma_latency_ns * 1e-9 + max(flops / core.peak_flops("bfloat16"), hbm / core.hbm_bandwidth)
    return KernelTime("attention over the KV cache", "roofline", config.n_layer, seconds * 1e6, flops, hbm,
                      roofline=True)


def training_model_flops(config: GPTConfig, batch: int, seq_len: int) -> float:
    """The model's matmul FLOPs of one forward + backward pass: 3 × the forward's (backward = 2 × forward)."""
    return 3.0 * sum(op.flops for op in forward_ops(config, batch, seq_len) if op.kind.endswith("matmul"))


def decode_model_flops(config: GPTConfig, batch: int, context: int) -> float:
    """The model's matmul FLOPs of one decode step (attention over `context` cached positions included)."""
    return sum(op.flops for op in decode_ops(config, batch, context) if op.kind.endswith("matmul"))


def simulate_training_step(config: GPTConfig, target: str, batch: int, seq_len: int | None = None) -> StepTime:
    T = config.block_size if seq_len is None else seq_len
    return simulate_step(training_step_calls(config, batch, T), target, "train", batch * T,
                         training_model_flops(config, batch, T))


def simulate_decode_step(config: GPTConfig, target: str, batch: int, context: int | None = None) -> StepTime:
    ctx = config.block_size if context is None else context
    step = simulate_step(decode_step_calls(config, batch), target, "decode", batch,
                         decode_model_flops(config, batch, ctx))
    step.kernels.insert(2, decode_attention_roofline(config, batch, ctx, target))
    return step


def simulate_generations(config: GPTConfig, batch: int = 8, seq_len: int | None = None,
                         decode_batch: int = 1, targets=("trn1", "trn2", "trn3")) -> dict[str, dict[str, StepTime]]:
    """{target: {"train": StepTime, "decode": StepTime}} for the same model on each generation."""
    return {t: {"train": simulate_training_step(config, t, batch, seq_len),
                "decode": simulate_decode_step(config, t, decode_batch)} for t in targets}
