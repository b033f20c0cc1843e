"""The tiny GPT: a decoder-only transformer in the spirit of nanoGPT, small enough to train on a CPU.

    token ids (B, T)
      → token embedding + position embedding                      (B, T, C)
      → n_layer × Block:  x = x + Attention(LayerNorm(x))          pre-LN residual blocks
                          x = x + MLP(LayerNorm(x))                MLP: Linear C→4C, GELU, Linear 4C→C
      → final LayerNorm → head (shares its weight with the token embedding)  → logits (B, T, vocab)

Everything is written out plainly (explicit causal mask, explicit softmax) because later stages of
the course capture this module and compile it for the simulated Trainium: nearly all of its work is
matrix multiplication, which `layer_costs` counts layer by layer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 43
    block_size: int = 32  # the context: the most positions the model can see at once
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd must be a multiple of n_head: n_embd={self.n_embd}, n_head={self.n_head}")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def to_json(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v for all heads in one matmul
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", mask.view(1, 1, config.block_size, config.block_size), persistent=False)
        self.last_attention: torch.Tensor | None = None  # (B, nh, T, T), kept when asked for plots

    def forward(self, x: torch.Tensor, keep_attention: bool = False) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 × (B, T, C)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
        # A position may look at itself and the past only: the future is what it must predict.
        scores = scores.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
        attention = F.softmax(scores, dim=-1)  # (B, nh, T, T), rows sum to 1
        if keep_attention:
            self.last_attention = attention.detach()
        y = self.dropout(attention) @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again: (B, T, C)
        return self.dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU()
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.gelu(self.fc(x))))  # (B, T, C) → (B, T, 4C) → (B, T, C)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, keep_attention: bool = False) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), keep_attention)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)  # token embedding
        self.wpe = nn.Embedding(config.block_size, config.n_embd)  # position embedding
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: reading a token and writing it use one table
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2: scale residual projections by depth
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # the tied table is counted once

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, keep_attention: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) token ids → logits (B, T, vocab); with targets (B, T) also the mean loss."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(
                f"sequence too long for the context: {T} positions, block_size is {self.config.block_size}"
            )
        positions = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(positions))  # (B, T, C)
        for block in self.blocks:
            x = block(x, keep_attention)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        loss = None
        if targets is not None:  # targets of -100 (padding, prompt) are skipped
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        return logits, loss

    def attention_maps(self) -> list[torch.Tensor]:
        """The attention of each layer from the last forward with ``keep_attention=True``: (B, nh, T, T)."""
        return [block.attn.last_attention for block in self.blocks]

    def configure_optimizer(self, learning_rate: float, weight_decay: float, betas=(0.9, 0.95)) -> torch.optim.AdamW:
        """AdamW; weight decay on matrices only (not on biases, LayerNorm gains or position table)."""
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


@dataclass(frozen=True)
class LayerCost:
    """One layer of the forward pass for one sequence of `seq_len` tokens."""

    name: str  # e.g. "blocks.0.attn.qkv"
    kind: str  # "matmul", "attention matmul", "layernorm", "softmax", "gelu", "add", "embedding"
    params: int
    flops: int  # forward FLOPs; a multiply-add counts as 2


def layer_costs(config: GPTConfig, seq_len: int | None = None) -> list[LayerCost]:
    """Parameters and forward FLOPs of every layer, in the order the forward pass runs them.

    Matmul FLOPs are exact (2 per multiply-add). The small elementwise layers are counted with
    rough per-element costs — LayerNorm ~8 (mean, variance, normalise, scale, shift), GELU ~8
    (tanh form), softmax ~5 (max, subtract, exp, sum, divide), residual add 1 — because only their
    order of magnitude matters next to the matmuls.
    """
    T = config.block_size if seq_len is None else seq_len
    C, V, nh, hs = config.n_embd, config.vocab_size, config.n_head, config.head_size
    rows = [
        LayerCost("wte", "embedding", V * C, 0),  # a table lookup: no arithmetic
        LayerCost("wpe", "embedding", config.block_size * C, T * C),  # added to the token embedding
    ]
    for i in range(config.n_layer):
        p = f"blocks.{i}"
        rows += [
            LayerCost(f"{p}.ln_1", "layernorm", 2 * C, 8 * T * C),
            LayerCost(f"{p}.attn.qkv", "matmul", C * 3 * C + 3 * C, 2 * T * C * 3 * C),
            LayerCost(f"{p}.attn.scores", "attention matmul", 0, 2 * nh * T * T * hs),  # q @ kᵀ
            LayerCost(f"{p}.attn.softmax", "softmax", 0, 5 * nh * T * T),
            LayerCost(f"{p}.attn.weighted_sum", "attention matmul", 0, 2 * nh * T * T * hs),  # att @ v
            LayerCost(f"{p}.attn.proj", "matmul", C * C + C, 2 * T * C * C),
            LayerCost(f"{p}.residual_1", "add", 0, T * C),
            LayerCost(f"{p}.ln_2", "layernorm", 2 * C, 8 * T * C),
            LayerCost(f"{p}.mlp.fc", "matmul", C * 4 * C + 4 * C, 2 * T * C * 4 * C),
            LayerCost(f"{p}.mlp.gelu", "gelu", 0, 8 * T * 4 * C),
            LayerCost(f"{p}.mlp.proj", "matmul", 4 * C * C + C, 2 * T * 4 * C * C),
            LayerCost(f"{p}.residual_2", "add", 0, T * C),
        ]
    rows += [
        LayerCost("ln_f", "layernorm", 2 * C, 8 * T * C),
        LayerCost("lm_head", "matmul", 0, 2 * T * C * V),  # weight tied to wte: no new parameters
    ]
    return rows


def is_matmul(cost: LayerCost) -> bool:
    return cost.kind in ("matmul", "attention matmul")
