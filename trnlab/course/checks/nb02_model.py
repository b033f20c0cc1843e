"""Checks for notebook 02, the model and its training."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.model.gpt import MLP, Block, GPTConfig


@exercise("nb02_causal_mask", notebook="02_model_and_training", points=3, answer="causal_attention",
          title="Causal self-attention")
def check_causal_attention(student_attention) -> None:
    generator = torch.Generator().manual_seed(0)
    for B, nh, T, hs in [(1, 1, 1, 4), (2, 4, 7, 8), (1, 2, 12, 16), (3, 1, 5, 3)]:
        q, k, v = (torch.randn(B, nh, T, hs, generator=generator) for _ in range(3))
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        got = student_attention(q.clone(), k.clone(), v.clone())
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckFailed(f"expected a tensor of shape {tuple(expected.shape)}, got {shape} for q, k, v of shape {(B, nh, T, hs)}")
        if not torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
            error = float((got - expected).abs().max())
            raise CheckFailed(
                f"largest difference from PyTorch's causal attention is {error:.3g} for q, k, v of shape {(B, nh, T, hs)} "
                "(scores = q @ kᵀ / √hs; future positions must get -inf before the softmax, so their weight is exactly 0)"
            )


@exercise("nb02_block_params", notebook="02_model_and_training", points=2, answer="block_params",
          title="Parameters of one transformer block")
def check_block_params(student_block_params) -> None:
    for n_embd in [8, 32, 96, 128, 256]:
        block = Block(GPTConfig(n_embd=n_embd, n_head=4))
        expected = sum(p.numel() for p in block.parameters())
        got = student_block_params(n_embd)
        if got != expected:
            raise CheckFailed(
                f"expected {expected}, got {got!r} for n_embd={n_embd} (count the weights and biases of qkv, "
                "attention proj, mlp fc and mlp proj, and the gain and shift of both LayerNorms)"
            )


@exercise("nb02_mlp_flops", notebook="02_model_and_training", points=2, answer="mlp_flops",
          title="FLOPs of the MLP")
def check_mlp_flops(student_mlp_flops) -> None:
    for T, n_embd in [(1, 8), (10, 32), (24, 128), (32, 64)]:
        with FlopCounterMode(display=False) as counter:
            MLP(GPTConfig(n_embd=n_embd, n_head=4))(torch.zeros(1, T, n_embd))
        expected = counter.get_total_flops()
        got = student_mlp_flops(T, n_embd)
        if got != expected:
            raise CheckFailed(
                f"expected {expected} (PyTorch's FLOP counter), got {got!r} for T={T}, n_embd={n_embd} "
                "(two matmuls, n_embd→4·n_embd→n_embd, for each of T tokens; a multiply-add is 2 FLOPs)"
            )
