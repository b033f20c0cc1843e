import math

import torch


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    T, hs = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T, T)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # key after query
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, nh, T, hs)
