""""Is my workload a fit?": a model's ops on the roofline, its memory against HBM, its time and cost.

For a `GPTConfig` (the course's tiny GPT or a larger one) this module gives

- every op's FLOPs (from `trnlab.model.layer_costs`) and the HBM bytes it reads and writes, hence its
  arithmetic intensity, to place against each chip's ridge point (`forward_ops`, `decode_ops`);
- the memory a training run needs (weights, gradients, AdamW state, activations) and an inference
  run needs (weights, KV cache), against HBM per chip (`training_memory`, `inference_memory`);
- per system, whether it fits one chip, the best MFU the roofline allows, and the time, dollars and
  energy to train (`fit_report`).

Bytes are counted as the model is written (`trnlab.model.gpt`): each op reads its inputs from HBM and
writes its output back, once. That is the unfused picture — a compiler that fuses ops (a flash-style
attention keeps its scores on chip) moves fewer bytes — and it ignores the cache a chip's SBUF gives.
The roofline bound is therefore an estimate of what limits each op, not a simulation: notebook 10
compares it with the simulator's timelines for the sizes the simulator runs quickly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnlab.economics.cost import TYPICAL_MFU, Estimate, estimate, training_flops
from trnlab.economics.figures import Accelerator, System, default_systems
from trnlab.model.gpt import GPTConfig, LayerCost, layer_costs

# Models to try, by name. GPT-2 sizes: Radford et al. 2019 (with its 50,257-token vocabulary and
# 1,024-token context); GPT-3 sizes: Brown et al. 2020, Table 2.1 (2,048-token context).
MODELS: dict[str, GPTConfig] = {
    "tiny GPT (this course)": GPTConfig(),
    "GPT-2 small": GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768),
    "GPT-2 medium": GPTConfig(vocab_size=50257, block_size=1024, n_layer=24, n_head=16, n_embd=1024),
    "GPT-2 XL": GPTConfig(vocab_size=50257, block_size=1024, n_layer=48, n_head=25, n_embd=1600),
    "GPT-3 6.7B": GPTConfig(vocab_size=50257, block_size=2048, n_layer=32, n_head=32, n_embd=4096),
    "GPT-3 175B": GPTConfig(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288),
}
CHINCHILLA_TOKENS_PER_PARAM = 20   # compute-optimal training tokens per parameter (Hoffmann et al. 2022)


def num_params(config: GPTConfig) -> int:
    """Parameters of the model (the tied head counted once), from `layer_costs`."""
    return sum(c.params for c in layer_costs(config))


@dataclass(frozen=True)
class OpTraffic:
    """One op: its FLOPs and the HBM bytes it reads plus writes."""

    name: str
    kind: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per HBM byte (0 for a pure data movement such as an embedding lookup)."""
        return self.flops / self.bytes if self.bytes else math.inf

    def roofline_seconds(self, peak_flops: float, bandwidth: float) -> float:
        """The op's time if it ran at its roof: max(compute time, memory time)."""
        return max(self.flops / peak_flops, self.bytes / bandwidth)


def linear_sizes(cost: LayerCost, T: int, config: GPTConfig) -> tuple[int, int, bool]:
    """(in, out, has bias) of a linear layer, recovered from its forward FLOPs and parameters.

    flops = 2 · T · in · out and params = in · out + out (weight and bias); the head has no
    parameters of its own (tied to the token table) and maps C to the vocabulary."""
    if cost.params == 0:                       # lm_head, tied
        return config.n_embd, config.vocab_size, False
    in_out = cost.flops // (2 * T)
    out = cost.params - in_out
    return in_out // out, out, True


def forward_ops(config: GPTConfig, batch: int = 1, seq_len: int | None = None,
                dtype_bytes: int = 2) -> list[OpTraffic]:
    """Every op of one forward pass over `batch` sequences of `seq_len` tokens, with HBM traffic."""
    T = config.block_size if seq_len is None else seq_len
    B, C, nh, hs = batch, config.n_embd, config.n_head, config.head_size
    R = B * T                                  # rows (tokens) in the batch
    ops = []
    for cost in layer_costs(config, T):
        suffix = cost.name.rsplit(".", 1)[-1]
        flops = cost.flops * B
        if cost.kind == "matmul":
            k, n, bias = linear_sizes(cost, T, config)
            elements = R * k + k * n + R * n + (n if bias else 0)     # x, W, y (and b)
        elif cost.kind == "attention matmul" and suffix == "scores":
            elements = 2 * B * nh * T * hs + B * nh * T * T            # q, k -> scores (B, nh, T, T)
        elif cost.kind == "attention matmul":
            elements = B * nh * T * T + 2 * B * nh * T * hs            # att, v -> y
        elif cost.kind == "softmax":
            elements = 2 * B * nh * T * T
        elif cost.kind == "layernorm":
            elements = 2 * R * C + 2 * C
        elif cost.kind == "gelu":
            elements = 2 * R * 4 * C
        elif cost.kind == "add":
            elements = 3 * R * C
        elif cost.name == "wpe":                                         # x + position rows
            elements = 2 * R * C + T * C
        else:                                                           # wte: gather R rows (+ int32 ids)
            elements = 2 * R * C + 2 * R
        ops.append(OpTraffic(cost.name, cost.kind, float(flops), float(elements * dtype_bytes)))
    return ops


def decode_ops(config: GPTConfig, batch: int = 1, context: int | None = None,
               dtype_bytes: int = 2) -> list[OpTraffic]:
    """One decode step with a KV cache: `batch` new tokens, each attending to `context` cached positions.

    The linear layers see `batch` rows but read their whole weight: their intensity is about
    `batch` FLOPs per byte, which is why decode is memory-bound until the batch is large."""
    L = config.block_size if context is None else context
    B, C, nh, hs = batch, config.n_embd, config.n_head, config.head_size
    ops = []
    for cost in layer_costs(config, seq_len=1):
        if cost.kind == "matmul":
            k, n, bias = linear_sizes(cost, 1, config)
            ops.append(OpTraffic(cost.name, cost.kind, float(cost.flops * B),
                                 float((B * k + k * n + B * n + (n if bias else 0)) * dtype_bytes)))
        elif cost.kind == "attention matmul":
            cache = B * L * C                  # K (scores) or V (weighted sum) of every cached position
            small = B * C + B * nh * L         # q in and scores out, or probabilities in and y out
            ops.append(OpTraffic(cost.name + " (KV cache)", cost.kind, float(2 * B * nh * L * hs),
                                 float((cache + small) * dtype_bytes)))
        elif cost.kind == "softmax":
            ops.append(OpTraffic(cost.name, cost.kind, float(5 * B * nh * L), float(2 * B * nh * L * dtype_bytes)))
        elif cost.kind in ("layernorm", "gelu", "add") or cost.name == "wpe":
            width = 4 * C if cost.kind == "gelu" else C
            reads = 2 if cost.kind == "add" else 1
            ops.append(OpTraffic(cost.name, cost.kind, float(cost.flops * B),
                                 float(((reads + 1) * B * width) * dtype_bytes)))
        else:
            ops.append(OpTraffic(cost.name, cost.kind, 0.0, float((2 * B * C + 2 * B) * dtype_bytes)))
    return ops


def roofline_mfu(ops: list[OpTraffic], peak_flops: float, bandwidth: float) -> float:
    """The best MFU the roofline allows for these ops run one after another on one chip."""
    seconds = sum(op.roofline_seconds(peak_flops, bandwidth) for op in ops)
    return sum(op.flops for op in ops) / (peak_flops * seconds) if seconds else 0.0


def compute_bound_share(ops: list[OpTraffic], ridge: float) -> float:
    """The share of the FLOPs that sit in ops right of the ridge point (compute-bound)."""
    total = sum(op.flops for op in ops)
    return sum(op.flops for op in ops if op.intensity >= ridge) / total if total else 0.0


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryNeed:
    """Bytes a run keeps in HBM, by what they hold."""

    weights: float
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    kv_cache: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache

    def chips_needed(self, accelerator: Accelerator) -> int:
        """Chips whose HBM holds it all (spread perfectly: ZeRO-3 style sharding, nothing replicated)."""
        return max(1, math.ceil(self.total / accelerator.hbm_bytes))

    def as_dict(self) -> dict:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "activations": self.activations, "kv_cache": self.kv_cache, "total": self.total}


def training_memory(config: GPTConfig, batch: int, seq_len: int | None = None) -> MemoryNeed:
    """Mixed-precision AdamW training without activation recomputation.

    Weights and gradients in bf16 (2 + 2 bytes per parameter), an fp32 master copy and AdamW's two
    moments (4 + 4 + 4): 16 bytes per parameter (Rajbhandari et al. 2020, ZeRO, §3.1). Activations
    per layer: s·b·h·(34 + 5·a·s/h) bytes in 16-bit (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", §4.1), plus the fp32 logits (4·s·b·V)."""
    N = num_params(config)
    s = config.block_size if seq_len is None else seq_len
    h, a = config.n_embd, config.n_head
    per_layer = s * batch * h * (34 + 5 * a * s / h)
    return MemoryNeed(weights=2.0 * N, gradients=2.0 * N, optimizer=12.0 * N,
                      activations=config.n_layer * per_layer + 4.0 * s * batch * config.vocab_size)


def inference_memory(config: GPTConfig, batch: int, context: int | None = None,
                     dtype_bytes: int = 2) -> MemoryNeed:
    """Weights plus the KV cache: K and V for every layer, sequence and position (2·L·B·ctx·C values)."""
    ctx = config.block_size if context is None else context
    return MemoryNeed(weights=float(dtype_bytes * num_params(config)),
                      kv_cache=float(2 * config.n_layer * batch * ctx * config.n_embd * dtype_bytes))


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FitRow:
    system: str
    hbm_per_chip_gib: float
    training_gib: float
    chips_for_memory: int        # chips whose HBM holds the training state (perfect sharding)
    fits_one_chip: bool
    ridge: float                 # FLOP per byte, bf16, one chip
    compute_bound_share: float   # share of forward FLOPs in compute-bound ops (one chip's roofline)
    roofline_mfu: float          # best MFU the roofline allows for these ops
    mfu_used: float              # min(assumed MFU, roofline bound)
    estimate: Estimate


def fit_report(config: GPTConfig, tokens: float, batch: int = 8, seq_len: int | None = None,
               systems: dict[str, System] | None = None, names: list[str] | None = None,
               mfu: float = TYPICAL_MFU, dtype: str = "bf16") -> list[FitRow]:
    """For each system: memory against HBM, the roofline's verdict on the ops, time/cost/energy to train.

    The MFU used is the assumed `mfu` unless the roofline says the ops cannot reach it (then the
    roofline bound): a model too small to be compute-bound is not trained at 40 % MFU."""
    systems = systems or default_systems()
    names = names or ["trn1.32xlarge", "trn2.48xlarge", "Trn3 UltraServer (Gen1)", "p4d.24xlarge", "p5.48xlarge"]
    ops = forward_ops(config, batch, seq_len)
    need = training_memory(config, batch, seq_len)
    flops = training_flops(num_params(config), tokens)
    rows = []
    for name in names:
        system = systems[name]
        acc = system.accelerator
        bound = roofline_mfu(ops, acc.peak(dtype), acc.hbm_bandwidth)
        used = min(mfu, bound)
        chips = need.chips_needed(acc)
        rows.append(FitRow(
            system=name, hbm_per_chip_gib=acc.hbm_bytes / 2**30, training_gib=need.total / 2**30,
            chips_for_memory=chips, fits_one_chip=chips == 1, ridge=acc.ridge(dtype),
            compute_bound_share=compute_bound_share(ops, acc.ridge(dtype)), roofline_mfu=bound, mfu_used=used,
            estimate=estimate(flops, system, used, dtype)))
    return rows


# The compiler's name for the op each kind of layer becomes (trnlab.compiler's IR, where the
# attention matmuls and their softmax are one fused "attention" op).
COMPILER_OP = {"matmul": "linear", "attention matmul": "attention", "softmax": "attention", "layernorm": "layer_norm",
               "gelu": "gelu", "add": "add", "embedding": "embedding"}


def compiler_supported_ops() -> tuple[str, ...] | None:
    """The op list `trnlab.compiler` publishes (`trnlab.compiler.SUPPORTED`), or None if it has none."""
    import trnlab.compiler as compiler
    supported = getattr(compiler, "SUPPORTED", None)
    return tuple(supported) if supported is not None else None


def op_coverage(config: GPTConfig) -> dict[str, bool] | None:
    """For each compiler op the model needs: does the compiler support it? None when the compiler
    publishes no op list (then this part of "is my workload a fit?" cannot be answered)."""
    supported = compiler_supported_ops()
    if supported is None:
        return None
    needed = dict.fromkeys(COMPILER_OP[c.kind] for c in layer_costs(config))
    return {op: op in supported for op in needed}
