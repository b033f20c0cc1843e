"""Training runs side by side: the compiled step on the simulated Trainium and PyTorch eager.

Both take the same batches (the corpus's train split, `BatchSampler` with a seed) and the same
AdamW configuration, from the same initial weights, so their losses can be compared step by step.

    batches = train_batches(steps=50, batch_size=4, seed=0)
    reference = run_pytorch(model, batches, AdamWConfig(lr=3e-3))         # losses of PyTorch eager
    step = compile_train_step(model, batches[0])
    losses = run_compiled(step, batches)                                  # losses on the device
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from trnlab.model.gpt import GPT, GPTConfig
from trnlab.training.step import AdamWConfig, TrainStep

SEQ_LEN = 24                    # the corpus's examples are 24 tokens (prompt, answer, padding)


def tiny_config(n_layer: int = 1, n_embd: int = 32, n_head: int = 2) -> GPTConfig:
    """A GPT small enough to train on the simulator in CI: one block, 32 features, 2 heads."""
    return GPTConfig(vocab_size=43, block_size=SEQ_LEN, n_layer=n_layer, n_head=n_head, n_embd=n_embd)


def tiny_model(seed: int = 0, **config) -> GPT:
    torch.manual_seed(seed)
    return GPT(tiny_config(**config))


def train_batches(steps: int, batch_size: int = 4, seed: int = 0, seq_len: int = SEQ_LEN) -> list:
    """`steps` batches (idx, targets) of the train split, answer tokens as targets, in a seeded order.

    The sampler trims each batch to its longest example; a compiled step has one shape (one NEFF per
    shape), so every batch is padded back to `seq_len` (pad ids, ignored targets: the same loss, and
    causal attention keeps the padding from changing any earlier position)."""
    from trnlab.data.batches import BatchSampler, encode_examples
    from trnlab.data.corpus import load_split
    from trnlab.data.tokenizer import CharTokenizer
    x, y = encode_examples(load_split("train"), CharTokenizer(), True)
    sampler = BatchSampler(x, y, batch_size, seed=seed)
    out = []
    for _ in range(steps):
        xb, yb = next(sampler)
        pad = seq_len - xb.shape[1]
        out.append((torch.nn.functional.pad(xb, (0, pad), value=0),
                    torch.nn.functional.pad(yb, (0, pad), value=-100)))
    return out


@dataclass
class RunLog:
    losses: list = field(default_factory=list)
    wall_s: list = field(default_factory=list)       # per step
    profiles: list = field(default_factory=list)     # StepProfile per step (compiled runs)


def run_pytorch(model: torch.nn.Module, batches: list, optimizer: AdamWConfig = AdamWConfig(),
                autocast: str = "none", lr_at: Callable[[int], float] | None = None) -> RunLog:
    """Train a copy of `model` in PyTorch eager on `batches` (torch.optim.AdamW); its losses."""
    model = copy.deepcopy(model)
    model.train()
    opt = optimizer.torch_optimizer(model)
    log = RunLog()
    for i, (x, y) in enumerate(batches):
        if lr_at is not None:
            for group in opt.param_groups:
                group["lr"] = lr_at(i)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "matmult"):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log.wall_s.append(time.perf_counter() - t0)
        log.losses.append(loss.item())
    log.model = model
    log.optimizer = opt
    return log


def run_compiled(step: TrainStep, batches: list, lr_at: Callable[[int], float] | None = None,
                 on_step: Callable[[int, float], None] | None = None) -> RunLog:
    """Run the compiled step on each batch; its losses, wall times and simulated profiles."""
    log = RunLog()
    for i, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        result = step(x, y, lr=None if lr_at is None else lr_at(step.step_count))
        log.wall_s.append(time.perf_counter() - t0)
        log.losses.append(result.loss)
        log.profiles.append(result.profile)
        if on_step is not None:
            on_step(i, result.loss)
    return log
