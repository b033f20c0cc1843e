"""The same model's training and decode steps on Trn1/Trn2/Trn3 from simulated timelines."""

import pytest

from trnlab.economics import simulated
from trnlab.hardware import presets
from trnlab.kernels import KERNELS
from trnlab.model import GPTConfig

TINY = GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)


@pytest.fixture(scope="module")
def results():
    return simulated.simulate_generations(TINY, batch=2, decode_batch=2)


def test_every_call_is_a_library_kernel_and_layers_are_counted(results):
    calls = simulated.training_step_calls(TINY, batch=2)
    assert all(c.kernel in KERNELS for c in calls)
    attention = [c for c in calls if c.kernel == "causal_attention_qkv"]
    assert attention[0].count == TINY.n_layer
    step = results["trn2"]["train"]
    assert step.by_label()["attention"] == pytest.approx(TINY.n_layer * next(
        k.latency_us for k in step.kernels if k.label == "attention"))


def test_steps_take_time_on_every_generation_and_chip_throughput_counts_the_cores(results):
    for target, steps in results.items():
        train, decode = steps["train"], steps["decode"]
        assert train.core_us > 0 and decode.core_us > 0
        assert train.tokens == 2 * TINY.block_size and decode.tokens == 2
        cores = presets.CHIPS[target].cores
        assert train.chip_tokens_per_s == pytest.approx(cores * train.tokens / (train.core_us * 1e-6))
        assert 0 < train.mfu < 1


def test_decode_attention_is_the_only_roofline_estimate(results):
    decode = results["trn3"]["decode"]
    assert [k.label for k in decode.kernels if k.roofline] == ["attention over the KV cache"]
    assert not any(k.roofline for k in results["trn3"]["train"].kernels)


def test_model_flops_of_a_training_step_are_three_forwards():
    flops = simulated.training_model_flops(TINY, 2, 16)
    C, V, T, R = 32, 20, 16, 32
    per_layer = 2 * R * C * (3 * C + C + 4 * C + 4 * C) + 2 * 2 * (2 * 2 * T * T * (C // 2))  # 2 ops × B × 2·nh·T²·hs
    assert flops == 3 * (TINY.n_layer * per_layer + 2 * R * C * V)


def test_simulated_steps_are_deterministic():
    simulated._CACHE.clear()
    a = simulated.simulate_training_step(TINY, "trn1", 2).core_us
    simulated._CACHE.clear()
    assert simulated.simulate_training_step(TINY, "trn1", 2).core_us == a
