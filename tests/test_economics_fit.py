"""'Is my workload a fit?': parameters, per-op HBM traffic and intensity, memory against HBM."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.economics import figures, fit
from trnlab.model import GPT, GPTConfig

small_configs = st.builds(
    lambda heads, width, layers, vocab, block: GPTConfig(vocab_size=vocab, block_size=block, n_layer=layers,
                                                        n_head=heads, n_embd=heads * width),
    st.integers(1, 4), st.integers(1, 16), st.integers(1, 3), st.integers(2, 60), st.integers(1, 40))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(small_configs)
def test_parameter_count_matches_the_pytorch_model(config):
    torch.manual_seed(0)
    assert fit.num_params(config) == GPT(config).num_params()


def test_named_models_have_their_published_sizes():
    assert round(fit.num_params(fit.MODELS["GPT-2 small"]) / 1e6) == 124
    assert round(fit.num_params(fit.MODELS["GPT-3 175B"]) / 1e9) == 175


def test_linear_layer_traffic_is_input_weight_bias_and_output():
    config = GPTConfig(n_embd=64, n_head=4, block_size=32)
    qkv = next(op for op in fit.forward_ops(config, batch=2) if op.name == "blocks.0.attn.qkv")
    R, C = 2 * 32, 64
    assert qkv.flops == 2 * R * C * 3 * C
    assert qkv.bytes == 2 * (R * C + C * 3 * C + 3 * C + R * 3 * C)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(small_configs, st.integers(1, 8))
def test_forward_flops_are_layer_costs_times_batch(config, batch):
    from trnlab.model import layer_costs
    assert sum(op.flops for op in fit.forward_ops(config, batch)) == batch * sum(c.flops for c in layer_costs(config))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(small_configs, st.integers(1, 64))
def test_matmul_intensity_grows_with_batch_and_decode_is_memory_bound(config, batch):
    """More rows reuse the same weight: a linear layer's intensity rises with the batch."""
    def intensity(b):
        return next(op for op in fit.forward_ops(config, b) if op.name == "blocks.0.mlp.fc").intensity
    assert intensity(batch + 1) > intensity(batch)
    fc = next(op for op in fit.decode_ops(config, batch) if op.name == "blocks.0.mlp.fc")
    assert fc.intensity < 2 * batch / 2 + 1e-9 + 1     # about `batch` FLOPs per byte (bf16)


def test_decode_attention_reads_the_whole_kv_cache():
    config = fit.MODELS["GPT-2 small"]
    scores = next(op for op in fit.decode_ops(config, batch=4, context=1000) if "scores" in op.name)
    assert scores.bytes >= 2 * 4 * 1000 * config.n_embd
    assert scores.intensity < 1.1


def test_roofline_mfu_is_at_most_one_and_one_for_compute_bound_ops():
    op = fit.OpTraffic("big", "matmul", 1e15, 1e9)
    assert fit.roofline_mfu([op], 100e12, 1e12) == pytest.approx(1.0)
    slow = fit.OpTraffic("small", "add", 1e6, 1e9)
    assert fit.roofline_mfu([op, slow], 100e12, 1e12) < 1.0


def test_training_memory_is_sixteen_bytes_per_parameter_plus_activations():
    config = fit.MODELS["GPT-2 small"]
    need = fit.training_memory(config, batch=8)
    N = fit.num_params(config)
    assert need.weights + need.gradients + need.optimizer == 16 * N
    s, h, a = 1024, 768, 12
    assert math.isclose(need.activations, 12 * s * 8 * h * (34 + 5 * a * s / h) + 4 * s * 8 * 50257)


def test_a_large_model_needs_many_chips_and_the_tiny_gpt_fits_one():
    acc = figures.default_accelerators()
    big = fit.training_memory(fit.MODELS["GPT-3 175B"], batch=1)
    assert big.chips_needed(acc["trn1"]) > big.chips_needed(acc["trn3"]) > 16
    tiny = fit.training_memory(fit.MODELS["tiny GPT (this course)"], batch=64)
    assert tiny.chips_needed(acc["trn1"]) == 1


def test_kv_cache_size():
    config = fit.MODELS["GPT-2 small"]
    need = fit.inference_memory(config, batch=8, context=1024)
    assert need.kv_cache == 2 * 12 * 8 * 1024 * 768 * 2


def test_fit_report_uses_the_roofline_bound_for_a_model_too_small_to_be_compute_bound():
    rows = fit.fit_report(fit.MODELS["tiny GPT (this course)"], tokens=8.2e6, batch=64)
    for row in rows:
        assert row.mfu_used == min(0.4, row.roofline_mfu) and row.roofline_mfu < 0.4
        assert row.fits_one_chip and row.estimate.usd > 0
    big = {r.system: r for r in fit.fit_report(fit.MODELS["GPT-2 small"], tokens=2.5e9, batch=8)}
    assert big["trn2.48xlarge"].mfu_used == 0.4


def test_op_coverage_uses_the_compilers_published_list(monkeypatch):
    import trnlab.compiler as compiler
    monkeypatch.setattr(compiler, "SUPPORTED", ("embedding", "add", "linear", "layer_norm", "gelu"), raising=False)
    coverage = fit.op_coverage(fit.MODELS["tiny GPT (this course)"])
    assert coverage == {"embedding": True, "add": True, "layer_norm": True, "linear": True, "attention": False,
                        "gelu": True}
    monkeypatch.delattr(compiler, "SUPPORTED")
    assert fit.op_coverage(fit.MODELS["tiny GPT (this course)"]) is None
