"""Checks for notebook 02, the model and its training (cases / run beside the student / judge elsewhere)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.model.gpt import Block, GPTConfig

NOTEBOOK = "02_model_and_training"


@exercise("nb02_causal_mask", notebook=NOTEBOOK, points=3, answer="causal_attention", title="Causal self-attention",
          asks_for=("torch.nn.functional.scaled_dot_product_attention", "trnlab.model.gpt.CausalSelfAttention",
                    "torch.nn.MultiheadAttention"))
class CausalAttention:
    def cases(rng):
        shapes = [(1, 1, 1, 4), (2, 4, 7, 8), (3, 1, 5, 3)]
        shapes += [tuple(int(v) for v in (rng.integers(1, 4), rng.integers(1, 5), rng.integers(2, 17), rng.integers(2, 17)))
                   for _ in range(2)]
        return [{"shape": list(shape), "seed": int(rng.integers(0, 2**31))} for shape in shapes]

    def _qkv(case):
        generator = torch.Generator().manual_seed(case["seed"])
        return [torch.randn(*case["shape"], generator=generator) for _ in range(3)]

    def run(causal_attention, case):
        q, k, v = CausalAttention._qkv(case)
        return plain.array(causal_attention(q, k, v), "causal_attention's result")

    def judge(case, got):
        q, k, v = CausalAttention._qkv(case)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
        shape = tuple(case["shape"])
        if got.shape != expected.shape:
            raise CheckFailed(f"expected a tensor of shape {expected.shape}, got {got.shape} for q, k, v of shape {shape}")
        error = float(np.max(np.abs(got.astype(np.float64) - expected))) if got.size else 0.0
        if not np.allclose(got, expected, atol=1e-5, rtol=1e-4):
            raise CheckFailed(
                f"largest difference from PyTorch's causal attention is {error:.3g} for q, k, v of shape {shape} "
                "(scores = q @ kᵀ / √hs; future positions must get -inf before the softmax, so their weight is exactly 0)")


@exercise("nb02_block_params", notebook=NOTEBOOK, points=2, answer="block_params",
          title="Parameters of one transformer block", asks_for=("trnlab.model.gpt.layer_costs",))
class BlockParams:
    def cases(rng):
        return [8, 32, 96, *(int(4 * rng.integers(1, 100)) for _ in range(3))]

    def run(block_params, n_embd):
        return plain.integer(block_params(n_embd), "block_params' result")

    def judge(n_embd, got):
        expected = sum(p.numel() for p in Block(GPTConfig(n_embd=n_embd, n_head=4)).parameters())
        if got != expected:
            raise CheckFailed(f"expected {expected}, got {got} for n_embd={n_embd} (count the weights and biases of qkv, "
                              "attention proj, mlp fc and mlp proj, and the gain and shift of both LayerNorms)")


def measured_block_flops(T: int, n_embd: int, n_head: int) -> int:
    """PyTorch's FLOP counter on the real Block, forward, one sequence of T tokens."""
    block = Block(GPTConfig(n_embd=n_embd, n_head=n_head, block_size=max(T, 1)))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        block(torch.zeros(1, T, n_embd))
    return int(counter.get_total_flops())


@exercise("nb02_block_flops", notebook=NOTEBOOK, points=3, answer="block_flops",
          title="FLOPs of one block, attention included",
          asks_for=("torch.utils.flop_counter.FlopCounterMode", "trnlab.model.gpt.layer_costs"))
class BlockFlops:
    def cases(rng):
        drawn = []
        for _ in range(4):
            n_head = int(rng.choice([1, 2, 4, 8]))
            drawn.append([int(rng.integers(1, 200)), n_head * int(rng.integers(1, 33)), n_head])
        return [[1, 8, 2], [32, 64, 4], [10, 64, 1], *drawn]

    def run(block_flops, case):
        return plain.integer(block_flops(*case), "block_flops' result")

    def judge(case, got):
        T, n_embd, n_head = case
        expected = measured_block_flops(T, n_embd, n_head)
        if got != expected:
            raise CheckFailed(
                f"expected {expected:,} (PyTorch's FLOP counter on a Block), got {got:,} for T={T}, n_embd={n_embd}, "
                f"n_head={n_head} (four linear layers for each of T tokens, plus attention's two matmuls per head — "
                "q @ kᵀ and weights @ v — which grow with T × T; a multiply-add is 2 FLOPs)")
