import math

import torch


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    T, hs = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, 0.0)  # mistake: a score of 0 still gets weight after the softmax
    return torch.softmax(scores, dim=-1) @ v
