"""Tensor parallelism (Megatron-style) on the tiny GPT: every rank holds 1/p of each big matrix.

Two kinds of split, used in pairs so that one all-reduce per pair is enough:

- **column-parallel** linear ``y = x Wᵀ + b``: rank r holds rows r of W (output features) and of b;
  it needs the whole input x and produces its slice of y (no communication forward; the gradient of
  x is a sum over ranks, so backward all-reduces it).
- **row-parallel** linear: rank r holds columns r of W (input features) and takes *its slice* of x —
  exactly what a column-parallel layer before it produced — and computes a partial y; an all-reduce
  sums the partials (forward), and b is added once.

In a Block: attention's qkv is column-parallel by heads (rank r computes the attention of its
n_head/p heads), attention's proj is row-parallel; the MLP's fc is column-parallel, GELU is applied
to each slice, and its proj is row-parallel. So each Block costs 2 all-reduces of a (B, T, C)
activation forward and 2 backward. Embeddings, LayerNorms and the head stay replicated here.

`TensorParallelGPT` runs the p ranks in one process: the shards are separate tensors, the forward
all-reduce is `collectives`' ring order of summation done in torch (so autograd carries the
gradients through), and autograd's sum of the gradients that flow into a shared input is the
backward all-reduce. Its logits and gradients equal the one-device model's (tests).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from trnlab.distributed import collectives
from trnlab.model.gpt import GPT


# -- the two layers on NumPy arrays, with the collectives made explicit -------------------------
def column_parallel_linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, p: int) -> list[np.ndarray]:
    """x (N, in) replicated, weight (out, in) split by rows → rank r's output slice (N, out/p)."""
    if weight.shape[0] % p:
        raise ValueError(f"column-parallel split: {weight.shape[0]} output features over {p} ranks")
    w, b = np.split(weight, p, axis=0), np.split(bias, p)
    return [x @ w[r].T + b[r] for r in range(p)]


def row_parallel_linear(x_slices: list[np.ndarray], weight: np.ndarray, bias: np.ndarray,
                        algorithm: str = "ring") -> list[np.ndarray]:
    """x split by features (rank r: (N, in/p)), weight (out, in) split by columns → partial sums,
    all-reduced; every rank ends with the whole (N, out)."""
    p = len(x_slices)
    if weight.shape[1] % p:
        raise ValueError(f"row-parallel split: {weight.shape[1]} input features over {p} ranks")
    w = np.split(weight, p, axis=1)
    partial = [x_slices[r] @ w[r].T for r in range(p)]
    return [y + bias for y in collectives.all_reduce(partial, algorithm)]


def _all_reduce(parts: list[torch.Tensor]) -> torch.Tensor:
    """The forward all-reduce of the row-parallel partial sums, as a torch sum so that autograd
    passes through it (its backward hands every rank the same gradient, as on hardware)."""
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


class TensorParallelBlock(nn.Module):
    """One Block of `GPT`, its attention and MLP weights split over p ranks."""

    def __init__(self, block: nn.Module, n_head: int, p: int):
        super().__init__()
        C = block.ln_1.weight.numel()
        if n_head % p:
            raise ValueError(f"tensor parallelism splits heads: {n_head} heads over {p} ranks")
        self.p, self.n_head_local, self.hs = p, n_head // p, C // n_head
        self.ln_1, self.ln_2 = copy.deepcopy(block.ln_1), copy.deepcopy(block.ln_2)  # replicated
        self.causal_mask = block.attn.causal_mask
        cs = C // p  # features of one rank's heads
        Wqkv, bqkv = block.attn.qkv.weight.detach(), block.attn.qkv.bias.detach()  # (3C, C), (3C,)
        rows = lambda r: torch.cat([torch.arange(k * C + r * cs, k * C + (r + 1) * cs) for k in range(3)])  # noqa: E731
        self.qkv_w = nn.ParameterList(nn.Parameter(Wqkv[rows(r)].clone()) for r in range(p))  # (3C/p, C)
        self.qkv_b = nn.ParameterList(nn.Parameter(bqkv[rows(r)].clone()) for r in range(p))
        Wp = block.attn.proj.weight.detach()  # (C, C)
        self.proj_w = nn.ParameterList(nn.Parameter(Wp[:, r * cs:(r + 1) * cs].clone()) for r in range(p))
        self.proj_b = nn.Parameter(block.attn.proj.bias.detach().clone())
        H = block.mlp.fc.weight.shape[0] // p
        self.fc_w = nn.ParameterList(nn.Parameter(block.mlp.fc.weight.detach()[r * H:(r + 1) * H].clone()) for r in range(p))
        self.fc_b = nn.ParameterList(nn.Parameter(block.mlp.fc.bias.detach()[r * H:(r + 1) * H].clone()) for r in range(p))
        self.fc2_w = nn.ParameterList(nn.Parameter(block.mlp.proj.weight.detach()[:, r * H:(r + 1) * H].clone()) for r in range(p))
        self.fc2_b = nn.Parameter(block.mlp.proj.bias.detach().clone())
        self.all_reduces = 0  # forward all-reduces issued (2 per Block per forward)

    def attention(self, x: torch.Tensor, r: int) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = F.linear(x, self.qkv_w[r], self.qkv_b[r]).split(self.n_head_local * self.hs, dim=2)
        q, k, v = (t.view(B, T, self.n_head_local, self.hs).transpose(1, 2) for t in (q, k, v))  # (B, nh/p, T, hs)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        scores = scores.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v  # (B, nh/p, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, self.n_head_local * self.hs)  # (B, T, C/p)
        return F.linear(y, self.proj_w[r])  # partial (B, T, C): row-parallel, before the all-reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x)
        x = x + _all_reduce([self.attention(h, r) for r in range(self.p)]) + self.proj_b
        h = self.ln_2(x)
        partial = [F.linear(F.gelu(F.linear(h, self.fc_w[r], self.fc_b[r])), self.fc2_w[r]) for r in range(self.p)]
        self.all_reduces += 2
        return x + _all_reduce(partial) + self.fc2_b


class TensorParallelGPT(nn.Module):
    """The GPT with every Block tensor-parallel over p ranks (embeddings, norms, head replicated)."""

    def __init__(self, model: GPT, p: int):
        super().__init__()
        self.config, self.p = model.config, p
        # replicated on every rank (copies: the one-device model keeps its own gradients)
        self.wte, self.wpe, self.ln_f = (copy.deepcopy(m) for m in (model.wte, model.wpe, model.ln_f))
        self.blocks = nn.ModuleList(TensorParallelBlock(b, model.config.n_head, p) for b in model.blocks)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        return logits, loss

    def gathered_grad(self, layer: int, name: str) -> torch.Tensor:
        """A split weight's gradient put back together (as the one-device model lays it out)."""
        block = self.blocks[layer]
        if name == "attn.qkv.weight":
            C = block.ln_1.weight.numel()
            parts = [g.grad.view(3, C // self.p, C) for g in block.qkv_w]
            return torch.cat(parts, dim=1).reshape(3 * C, C)
        if name == "attn.proj.weight":
            return torch.cat([w.grad for w in block.proj_w], dim=1)
        if name == "mlp.fc.weight":
            return torch.cat([w.grad for w in block.fc_w], dim=0)
        if name == "mlp.proj.weight":
            return torch.cat([w.grad for w in block.fc2_w], dim=1)
        raise KeyError(f"{name!r} is not a split weight")
