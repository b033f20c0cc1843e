"""Reference training of the tiny GPT in PyTorch on the CPU.

AdamW; the learning rate warms up linearly, then decays along a cosine to `min_lr`; gradients are
clipped; every `eval_interval` steps the loss on the validation split is measured. Everything random
is seeded, so two runs with the same config give the same losses. At the end the model answers the
whole test split and the exact-match accuracy per task is reported.

    python -m trnlab train                       # the committed checkpoint's recipe
    python -m trnlab train --steps 200 --out /tmp/ckpt
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from trnlab.data.batches import BatchSampler, encode_examples
from trnlab.data.corpus import CORPUS_DIR, load_split
from trnlab.data.tokenizer import CharTokenizer
from trnlab.model.checkpoint import save_checkpoint
from trnlab.model.generate import accuracy_by_task
from trnlab.model.gpt import GPT, GPTConfig


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 4000
    batch_size: int = 64
    learning_rate: float = 3e-3
    min_lr: float = 1e-4
    warmup_steps: int = 200
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_interval: int = 250
    answer_only: bool = True  # loss on answer tokens only
    seed: int = 0
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 32
    # One thread by default: the losses then do not depend on how many cores a machine has (more
    # threads may sum in another order), and for a model this small a second thread gains little.
    threads: int = 1  # 0 = PyTorch's default


def learning_rate_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up to `learning_rate`, then a cosine down to `min_lr` at the last step."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return config.min_lr + cosine * (config.learning_rate - config.min_lr)


@dataclass
class TrainResult:
    model: GPT
    tokenizer: CharTokenizer
    train_loss: list[float] = field(default_factory=list)  # one per step
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    test_accuracy: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def log(self, config: TrainConfig) -> dict:
        return {
            "train_config": asdict(config),
            "params": self.model.num_params(),
            "train_loss": [round(x, 5) for x in self.train_loss],
            "val_steps": self.val_steps,
            "val_loss": [round(x, 5) for x in self.val_loss],
            "test_accuracy": self.test_accuracy,
            "seconds": round(self.seconds, 1),
            "torch_threads": torch.get_num_threads(),  # called inside train(): the threads used
        }


@torch.no_grad()
def split_loss(model: GPT, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500) -> float:
    """Mean loss over a whole encoded split (every counted target weighs the same)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(x), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        _, loss = model(xb, yb)
        n = int((yb != -100).sum())
        total, count = total + float(loss) * n, count + n
    model.train(was_training)
    return total / count


def train(
    config: TrainConfig = TrainConfig(),
    corpus_dir: Path = CORPUS_DIR,
    out_dir: Path | None = None,
    progress: bool = True,
    evaluate_test: bool = True,
    on_eval: Callable[[int, "TrainResult"], None] | None = None,
) -> TrainResult:
    """Train from scratch; save a checkpoint to `out_dir` if given. Returns the model and its history."""
    start = time.perf_counter()
    threads_before = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        return _train(config, corpus_dir, out_dir, progress, evaluate_test, on_eval, start)
    finally:
        torch.set_num_threads(threads_before)


def _train(config: TrainConfig, corpus_dir: Path, out_dir: Path | None, progress: bool, evaluate_test: bool,
           on_eval: Callable[[int, "TrainResult"], None] | None, start: float) -> TrainResult:
    torch.manual_seed(config.seed)
    tokenizer = CharTokenizer()
    train_x, train_y = encode_examples(load_split("train", corpus_dir), tokenizer, config.answer_only)
    val_x, val_y = encode_examples(load_split("val", corpus_dir), tokenizer, config.answer_only)
    model_config = GPTConfig(
        vocab_size=tokenizer.vocab_size, block_size=config.block_size,
        n_layer=config.n_layer, n_head=config.n_head, n_embd=config.n_embd,
    )
    model = GPT(model_config)
    optimizer = model.configure_optimizer(config.learning_rate, config.weight_decay)
    batches = BatchSampler(train_x, train_y, config.batch_size, seed=config.seed)
    result = TrainResult(model, tokenizer)

    model.train()
    bar = tqdm(range(config.steps), desc="training", disable=not progress, mininterval=1.0)
    for step in bar:
        lr = learning_rate_at(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)  # (B, T)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        result.train_loss.append(loss.item())
        if (step + 1) % config.eval_interval == 0 or step + 1 == config.steps:
            val = split_loss(model, val_x, val_y)
            result.val_steps.append(step + 1)
            result.val_loss.append(val)
            bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{val:.3f}", lr=f"{lr:.1e}")
            if on_eval is not None:
                on_eval(step + 1, result)  # e.g. to measure accuracy or update a live plot
    bar.close()
    model.eval()
    if evaluate_test:
        result.test_accuracy = accuracy_by_task(model, tokenizer, load_split("test", corpus_dir))
    result.seconds = time.perf_counter() - start
    if out_dir is not None:
        save_checkpoint(model, tokenizer, out_dir, result.log(config))
    return result
