"""What a compiled training step costs: FLOPs checked against 6·N·tokens, MFU, and the time and money
to train the checkpoint's model on Trn1, Trn2 and Trn3.

FLOPs. The textbook count of a training step is 6·N·tokens (Kaplan et al. 2020: 2 per parameter and
token forward, 4 backward), N the parameters that multiply activations (every weight matrix and the
lm_head; embeddings are lookups, biases and norms are not matmuls), plus attention's own matmuls
(q·kᵀ and attention·v: 4·L·T²·C per sequence forward, 3× that for the step). The program's count is
what its Tensor-engine instructions do (nc_transpose's identity matmuls excluded); it is a little
larger, because the backward also sums over rows with ones-vector matmuls (bias gradients, the
embedding gradient's one-hot matmul, the loss's sums).

Time and cost. One step of the program runs on one NeuronCore. A chip has several cores (2 on Trn1,
8 on Trn2/Trn3); training on a whole chip would run a step per core side by side (data parallelism;
the gradient all-reduce is notebook 08's and is left out here). So the estimate is core-hours:

    time on one core  = steps × simulated time per step
    dollars           = core-hours × (instance price per chip-hour / cores per chip)

with the prices of `trnlab.economics` (Trn3's is an assumption: no public price yet). The
checkpoint's recipe (data/checkpoint/train_log.json) is 4000 steps of 64 sequences; the estimate
runs each step's 64 sequences as micro-batches of `micro_batch` (gradient accumulation: the same
tokens, the optimizer costed once per micro-batch, which makes it a slight over-estimate) so that
tracing stays quick, and pads every sequence to 24 tokens (the reference run trims padding columns:
another slight over-estimate).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from trnlab import DATA_DIR
from trnlab.model.gpt import GPTConfig

GENERATIONS = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "Trn3 UltraServer (Gen1)"}


def matmul_params(config: GPTConfig) -> int:
    """N of 6·N·tokens: the weights of every matmul (qkv, proj, fc, mlp proj per block; the lm_head)."""
    C = config.n_embd
    return config.n_layer * (C * 3 * C + C * C + C * 4 * C + 4 * C * C) + config.vocab_size * C


def textbook_flops(config: GPTConfig, batch: int, seq_len: int) -> dict:
    """{"6ND": 6·N·tokens, "attention": the attention matmuls of the step, "total": their sum}."""
    tokens = batch * seq_len
    dense = 6.0 * matmul_params(config) * tokens
    attention = 3.0 * 4.0 * config.n_layer * batch * seq_len * seq_len * config.n_embd
    return {"6ND": dense, "attention": attention, "total": dense + attention, "tokens": tokens}


def flops_check(step, config: GPTConfig, profile=None) -> dict:
    """The program's FLOPs of one step against the textbook count; `ratio` = program / (6ND + attention)."""
    (batch, seq_len), _ = step.batch_shape
    profile = profile or (step.last.profile if step.last is not None else step.simulate())
    book = textbook_flops(config, batch, seq_len)
    return {"program": profile.flops, **book, "ratio": profile.flops / book["total"],
            "ratio_6ND": profile.flops / book["6ND"], "by_phase": dict(profile.flops_by_phase)}


@dataclass(frozen=True)
class TrainingEstimate:
    """Training the checkpoint's recipe on one generation, from the simulated step."""
    target: str
    system: str
    step_us: float                 # one micro-batch step on one core
    micro_steps: int               # steps x micro-batches per step
    core_hours: float
    usd: float
    mfu: float
    usd_per_core_hour: float
    shares: dict

    @property
    def core_seconds(self) -> float:
        return self.core_hours * 3600

    def row(self) -> dict:
        return {"target": self.target, "system": self.system, "us/step": round(self.step_us, 1),
                "MFU": f"{self.mfu:.2%}", "core-hours": round(self.core_hours, 3),
                "USD": round(self.usd, 4), "forward": f"{self.shares['forward']:.0%}",
                "backward": f"{self.shares['backward']:.0%}", "optimizer": f"{self.shares['optimizer']:.0%}"}


def checkpoint_recipe(directory=DATA_DIR / "checkpoint") -> dict:
    """The checkpoint's training: steps, batch size and the test accuracy it reached."""
    log = json.loads((directory / "train_log.json").read_text())
    cfg = log["train_config"]
    return {"steps": cfg["steps"], "batch_size": cfg["batch_size"], "test_accuracy": log["test_accuracy"],
            "params": log["params"]}


def estimate_training(step, steps: int, batch_size: int, targets=("trn1", "trn2", "trn3"),
                      systems: dict | None = None) -> list[TrainingEstimate]:
    """Time and cost of `steps` optimizer steps of `batch_size` sequences, run as micro-batches of the
    compiled step's batch, on each target (one simulated step per target, timing-only)."""
    from trnlab.economics.figures import default_systems
    from trnlab.hardware.device import chip_spec
    systems = systems or default_systems()
    (micro, _), _ = step.batch_shape
    if batch_size % micro:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the compiled micro-batch {micro}")
    micro_steps = steps * (batch_size // micro)
    out = []
    for target in targets:
        profile = step.simulate(target)
        system = systems[GENERATIONS[target]]
        per_core_hour = system.usd_per_chip_hour / chip_spec(target).cores
        core_hours = micro_steps * profile.total_ns * 1e-9 / 3600
        out.append(TrainingEstimate(target, system.name, profile.total_us, micro_steps, core_hours,
                                    core_hours * per_core_hour, profile.mfu, per_core_hour, profile.shares))
    return out


def step_report(profile) -> str:
    """Simulated time per step, MFU and the forward / backward / optimizer shares, as text."""
    lines = [profile.summary()]
    for phase in ("forward", "backward", "optimizer"):
        lines.append(f"  {phase:9s} {profile.phase_ns[phase] / 1e3:9.1f} us  {profile.shares[phase]:6.1%}  "
                     f"{profile.flops_by_phase[phase] / 1e6:8.2f} MFLOP")
    return "\n".join(lines)
