"""Data parallelism on the tiny GPT: every rank holds the whole model and a slice of the global batch.

One training step on W ranks:

    global batch (B rows) ──split rows──► rank r: B/W rows
    rank r: forward + backward of  loss_sum(rows of r) / tokens(global batch)      (a `TrainStep`)
    gradients ──all-reduce (sum)──► every rank has the gradient of the global batch's mean loss
    clip, AdamW ──► every rank applies the same update, so the replicas stay identical

Dividing each rank's *sum* of token losses by the token count of the whole global batch (not by its
own) is what makes the W gradients add up to exactly the one-device gradient: the loss is a mean
over answer tokens, and ranks hold different numbers of them.

ZeRO-1 (optimizer-state sharding): the gradients are reduce-scattered instead, rank r keeps the
AdamW state (m, v) of its 1/W of the flat parameter vector only, updates that slice, and the
updated slices are all-gathered. Same numbers, 1/W of the optimizer memory per rank.

The step is a seam: `TrainStep` is "given a model and rows, fill the gradients and return the
loss sum". `torch_step` is PyTorch eager today; a compiled step on the simulated Trainium can take
its place without changing the data-parallel code. `simulate` runs W replicas in one process with
the NumPy collectives of `collectives`; `trnlab.distributed.train` runs the same pieces in W
processes over torch.distributed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from trnlab.data.batches import IGNORE_INDEX
from trnlab.distributed import collectives
from trnlab.model.gpt import GPT


class TrainStep(Protocol):
    def __call__(self, model: GPT, x: torch.Tensor, y: torch.Tensor, global_tokens: int) -> float:
        """Forward and backward of this rank's rows; gradients land in ``p.grad``; returns the sum
        of the token losses (not divided)."""


def torch_step(model: GPT, x: torch.Tensor, y: torch.Tensor, global_tokens: int) -> float:
    """The PyTorch eager `TrainStep`: sum of the answer-token losses / global token count, backward."""
    logits, _ = model(x)  # (b, T, vocab)
    loss_sum = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), ignore_index=IGNORE_INDEX,
                               reduction="sum")
    (loss_sum / global_tokens).backward()
    return float(loss_sum.detach())


def shard_rows(x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s contiguous B/W rows of the global batch."""
    rows = x.shape[0]
    if rows % world:
        raise ValueError(f"the global batch must split evenly: {rows} rows over {world} ranks")
    per = rows // world
    return x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]


def counted_tokens(y: torch.Tensor) -> int:
    return int((y != IGNORE_INDEX).sum())


# -- the model's gradients and parameters as one flat fp32 vector (the all-reduce bucket) -------
def parameters(model: GPT) -> list[torch.nn.Parameter]:
    return list(model.parameters())  # the tied embedding / head weight appears once


def flat_grads(model: GPT) -> np.ndarray:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in parameters(model)]).detach().numpy().astype(np.float32, copy=True)


def set_flat_grads(model: GPT, flat: np.ndarray | torch.Tensor) -> None:
    flat = torch.as_tensor(flat)
    offset = 0
    for p in parameters(model):
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def flat_params(model: GPT) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters(model)])


def set_flat_params(model: GPT, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in parameters(model):
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n


def decay_mask(model: GPT) -> torch.Tensor:
    """True where AdamW applies weight decay: matrices, as `GPT.configure_optimizer` decides."""
    return torch.cat([torch.full((p.numel(),), p.dim() >= 2) for p in parameters(model)])


# -- ZeRO-1 -------------------------------------------------------------------------------------
class ZeroOneShard:
    """Rank `rank`'s slice [lo, hi) of the flat parameter vector and the AdamW state for it only.

    The slice is cut at the decay / no-decay boundary into (at most) two tensors, so that AdamW's
    two parameter groups get exactly the weight decay `GPT.configure_optimizer` gives them."""

    def __init__(self, model: GPT, rank: int, world: int, learning_rate: float, weight_decay: float,
                 betas: tuple[float, float] = (0.9, 0.95)):
        n = sum(p.numel() for p in parameters(model))
        self.per_rank = math.ceil(n / world)
        self.lo, self.hi = min(n, rank * self.per_rank), min(n, (rank + 1) * self.per_rank)
        self.total = n
        flat, mask = flat_params(model), decay_mask(model)
        self.pieces: list[tuple[int, int, torch.nn.Parameter]] = []  # (start, stop, parameter)
        groups = []
        start = self.lo
        while start < self.hi:  # split [lo, hi) into runs of equal mask value
            value = bool(mask[start])
            stop = start
            while stop < self.hi and bool(mask[stop]) == value:
                stop += 1
            param = torch.nn.Parameter(flat[start:stop].clone())
            self.pieces.append((start, stop, param))
            groups.append({"params": [param], "weight_decay": weight_decay if value else 0.0})
            start = stop
        self.optimizer = torch.optim.AdamW(groups or [{"params": []}], lr=learning_rate, betas=betas)

    @property
    def state_bytes(self) -> int:
        """Optimizer state this rank holds: m and v in fp32 for its slice."""
        return 2 * 4 * (self.hi - self.lo)

    def step(self, grad_slice: torch.Tensor, lr: float) -> torch.Tensor:
        """Update the slice with its (already summed and clipped) gradient; returns the new slice,
        padded to `per_rank` elements for the all-gather."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        for start, stop, param in self.pieces:
            param.grad = grad_slice[start - self.lo:stop - self.lo].clone()
        self.optimizer.step()
        out = torch.zeros(self.per_rank)
        for start, stop, param in self.pieces:
            out[start - self.lo:stop - self.lo] = param.detach()
        return out


def clip_coefficient(total_norm: float, max_norm: float) -> float:
    """What torch.nn.utils.clip_grad_norm_ multiplies the gradients by."""
    return min(1.0, max_norm / (total_norm + 1e-6))


# -- W replicas in one process ------------------------------------------------------------------
@dataclass
class SimulatedRun:
    losses: list[float]
    replicas_identical: bool
    optimizer_state_bytes_per_rank: int
    schedules: list[collectives.Schedule]


def simulate(model: GPT, batches, steps: int, world: int, learning_rate: Callable[[int], float],
             weight_decay: float = 0.1, grad_clip: float = 1.0, zero1: bool = False, algorithm: str = "ring",
             step_fn: TrainStep = torch_step) -> SimulatedRun:
    """Train `world` copies of `model` on shards of the same global batches, gradients joined by the
    NumPy collectives. `batches` yields global (x, y); returns the loss of every step, and leaves
    rank 0's trained weights in `model`."""
    replicas = [copy.deepcopy(model) for _ in range(world)]
    for r in replicas:
        r.train()
    if zero1:
        shards = [ZeroOneShard(replicas[r], r, world, learning_rate(0), weight_decay) for r in range(world)]
        state_bytes = max(s.state_bytes for s in shards)
    else:
        optimizers = [r.configure_optimizer(learning_rate(0), weight_decay) for r in replicas]
        state_bytes = 2 * 4 * sum(p.numel() for p in parameters(model))
    losses, schedules = [], []
    for step in range(steps):
        lr = learning_rate(step)
        x, y = next(batches)
        tokens = counted_tokens(y)
        loss_sum = 0.0
        grads = []
        for r, replica in enumerate(replicas):
            replica.zero_grad(set_to_none=True)
            xs, ys = shard_rows(x, y, r, world)
            loss_sum += step_fn(replica, xs, ys, tokens)
            grads.append(flat_grads(replica))
        losses.append(loss_sum / tokens)
        schedule = collectives.Schedule(algorithm, world)
        if not zero1:
            summed = collectives.all_reduce(grads, algorithm, schedule)
            for r, replica in enumerate(replicas):
                set_flat_grads(replica, summed[r])
                torch.nn.utils.clip_grad_norm_(replica.parameters(), grad_clip)
                for group in optimizers[r].param_groups:
                    group["lr"] = lr
                optimizers[r].step()
        else:
            per = shards[0].per_rank
            padded = [np.pad(g, (0, per * world - g.size)) for g in grads]
            pieces = collectives.reduce_scatter(padded, "ring" if algorithm == "tree" else algorithm, schedule)
            # the global gradient norm from the slices: an all-reduce of W numbers
            norm = math.sqrt(float(sum(np.sum(p.astype(np.float64) ** 2) for p in pieces)))
            coef = clip_coefficient(norm, grad_clip)
            new = [shards[r].step(torch.from_numpy(pieces[r]) * coef, lr).numpy() for r in range(world)]
            full = collectives.all_gather(new, "ring" if algorithm == "tree" else algorithm, schedule)
            for r, replica in enumerate(replicas):
                set_flat_params(replica, torch.from_numpy(full[r][:shards[0].total]))
        schedules.append(schedule)
    reference = flat_params(replicas[0])
    identical = all(torch.equal(reference, flat_params(r)) for r in replicas[1:])
    model.load_state_dict(replicas[0].state_dict())
    return SimulatedRun(losses, identical, state_bytes, schedules)


def single_device(model: GPT, batches, steps: int, learning_rate: Callable[[int], float], weight_decay: float = 0.1,
                  grad_clip: float = 1.0) -> list[float]:
    """The reference: the same steps on one device, the whole global batch at once (as
    `trnlab.model.train` does)."""
    model.train()
    optimizer = model.configure_optimizer(learning_rate(0), weight_decay)
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step)
        x, y = next(batches)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses
