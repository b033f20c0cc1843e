"""Checks for notebook 10, generations, cost and energy.

Every expected value comes from `trnlab.economics` itself: the calculator's estimate for a system
built from the exercise's numbers, the HBM traffic `forward_ops` counts for a real model's linear
layers, and the MFU `mfu_for_saving` solves for.
"""

from __future__ import annotations

import math

import numpy as np

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.economics import claims, cost
from trnlab.economics.figures import ASSUMED, Accelerator, Sourced, System
from trnlab.economics.fit import forward_ops, linear_sizes
from trnlab.model.gpt import GPTConfig, layer_costs

NOTEBOOK = "10_generations_cost_and_energy"


def _number(value, what: str, inputs) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CheckFailed(f"{what} should be a number, got {value!r} for {inputs}")
    return float(value)


def _system(peak_tflops_per_chip: float, chips: int, usd_per_hour: float, name: str = "system") -> System:
    acc = Accelerator(name=name, peak_flops={"bf16": peak_tflops_per_chip * 1e12}, hbm_bytes=1.0, hbm_bandwidth=1.0,
                      power=Sourced(1.0, "W", "exercise", ASSUMED), source="exercise")
    return System(name, acc, chips, Sourced(usd_per_hour, "USD/h", "exercise", ASSUMED))


# -- 1. the cost to train a model from its FLOPs ---------------------------------------------------
@exercise("nb10_training_cost", notebook=NOTEBOOK, points=2, answer="training_cost",
          title="The cost to train a model from its FLOPs")
def check_training_cost(training_cost) -> None:
    cases = [(124e6, 2.5e9, 667.0, 16, 0.40, 35.76), (6.7e9, 300e9, 190.0, 16, 0.35, 21.50),
             (1.0e9, 20e9, 312.0, 8, 0.50, 32.77), (175e9, 300e9, 671.0, 144, 0.30, 321.84),
             (2e5, 8.2e6, 667.0, 16, 0.05, 35.76), (7e10, 1.4e12, 989.0, 8, 0.45, 55.04)]
    for case in cases:
        params, tokens, peak, chips, mfu, price = case
        expected = cost.estimate(cost.training_flops(params, tokens), _system(peak, chips, price), mfu).usd
        got = _number(training_cost(*case), "the cost in USD", case)
        if not math.isclose(got, expected, rel_tol=1e-6):
            raise CheckFailed(
                f"expected ${expected:,.2f}, got ${got:,.2f} for (params, tokens, peak_tflops_per_chip, chips, mfu, "
                f"usd_per_hour) = {case} (FLOPs = 6·N·D; seconds = FLOPs / (chips · peak · 10^12 · MFU); "
                f"dollars = hours × price)")


# -- 2. arithmetic intensity of a linear layer ---------------------------------------------------
def _linear_layers() -> list[tuple[tuple, float]]:
    """((rows, d_in, d_out, dtype_bytes), intensity) of real models' linear layers, from forward_ops."""
    out = []
    for config, batch, seq, dtype_bytes in [(GPTConfig(), 1, 32, 2), (GPTConfig(n_embd=768, n_head=12), 8, 32, 2),
                                            (GPTConfig(n_embd=256, n_head=4, block_size=128), 4, 128, 4),
                                            (GPTConfig(n_embd=96, n_head=4), 3, 7, 1)]:
        costs = {c.name: c for c in layer_costs(config, seq)}
        for op in forward_ops(config, batch, seq, dtype_bytes):
            if op.kind == "matmul" and costs[op.name].params > 0 and op.name.startswith("blocks.0"):
                d_in, d_out, _ = linear_sizes(costs[op.name], seq, config)
                out.append(((batch * seq, d_in, d_out, dtype_bytes), op.intensity))
    return out


@exercise("nb10_linear_intensity", notebook=NOTEBOOK, points=2, answer="linear_intensity",
          title="Arithmetic intensity of a linear layer")
def check_linear_intensity(linear_intensity) -> None:
    for case, expected in _linear_layers():
        got = _number(linear_intensity(*case), "the intensity in FLOP per byte", case)
        if not math.isclose(got, expected, rel_tol=1e-9):
            raise CheckFailed(
                f"expected {expected:.4f} FLOP/byte, got {got:.4f} for (rows, d_in, d_out, dtype_bytes) = {case} "
                "(FLOPs = 2·rows·d_in·d_out; bytes = every element read or written once: the input x, the weight W, "
                "the bias b and the output y, each times dtype_bytes)")


# -- 3. the MFU at which a cost claim holds --------------------------------------------------------
@exercise("nb10_claim_mfu", notebook=NOTEBOOK, points=2, answer="mfu_needed",
          title="The MFU at which a cost claim holds")
def check_mfu_needed(mfu_needed) -> None:
    cases = [(0.5, 21.50, 3040.0, 32.77, 2496.0, 0.40), (0.5, 21.50, 3040.0, 21.96, 2496.0, 0.40),
             (0.3, 35.76, 10672.0, 55.04, 7912.0, 0.45), (0.0, 10.0, 1000.0, 10.0, 1000.0, 0.3),
             (0.25, 5.0, 100.0, 8.0, 120.0, 0.5), (0.6, 21.50, 3040.0, 55.04, 7912.0, 0.35)]
    for case in cases:
        saving, price_a, peak_a, price_b, peak_b, mfu_b = case
        a, b = _system(peak_a, 1, price_a, "a"), _system(peak_b, 1, price_b, "b")
        expected = claims.mfu_for_saving(a, b, saving, mfu_b)
        got = _number(mfu_needed(*case), "the MFU", case)
        if not math.isclose(got, expected, rel_tol=1e-6):
            raise CheckFailed(
                f"expected an MFU of {expected:.4f}, got {got:.4f} for (saving, price_a, peak_a, price_b, peak_b, "
                f"mfu_b) = {case} (cost ∝ price / (peak · MFU): solve cost_a = (1 - saving) · cost_b for MFU_a)")
