"""Data, tensor and pipeline parallelism on the tiny GPT give the one-device numbers; the scaling
estimates and the memory calculation follow their formulas.

Tolerances: data parallelism sums the same per-token gradients in another order (shards, then the
all-reduce), so losses agree to 1e-5 relative over the steps (measured: about 4e-7). Tensor and
pipeline parallelism compute the same matmuls split differently: logits and gradients to 1e-5 absolute.
"""

from __future__ import annotations

import copy

import pytest
import torch

from trnlab.data.batches import BatchSampler, encode_examples
from trnlab.data.corpus import load_split
from trnlab.data.tokenizer import CharTokenizer
from trnlab.distributed import data_parallel as dp
from trnlab.distributed import pipeline as pp
from trnlab.distributed import scaling as S
from trnlab.distributed import tensor_parallel as tp
from trnlab.distributed import topology as T
from trnlab.model.gpt import GPT, GPTConfig


@pytest.fixture(scope="module")
def data():
    tokenizer = CharTokenizer()
    x, y = encode_examples(load_split("train")[:2000], tokenizer)
    return tokenizer, x, y


def _model(tokenizer, n_layer=2) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=n_layer, n_head=4, n_embd=32))


@pytest.mark.parametrize("world,algorithm,zero1", [(2, "ring", False), (4, "rdh", False), (4, "tree", False),
                                                   (4, "ring", True), (8, "mesh", True)])
def test_data_parallel_training_equals_one_device_on_the_same_global_batch(data, world, algorithm, zero1):
    tokenizer, x, y = data
    model = _model(tokenizer)
    lr = lambda step: 1e-2  # noqa: E731
    reference = dp.single_device(copy.deepcopy(model), BatchSampler(x, y, 16, seed=1), 4, lr)
    run = dp.simulate(copy.deepcopy(model), BatchSampler(x, y, 16, seed=1), 4, world, lr, zero1=zero1,
                      algorithm=algorithm)
    assert run.losses == pytest.approx(reference, rel=1e-5)
    assert reference[0] != reference[-1]
    assert run.replicas_identical  # every rank applied the same update


def test_zero1_keeps_one_over_w_of_the_optimizer_state_per_rank(data):
    tokenizer, x, y = data
    model = _model(tokenizer)
    full = dp.simulate(copy.deepcopy(model), BatchSampler(x, y, 8, seed=0), 1, 4, lambda s: 1e-3)
    sharded = dp.simulate(copy.deepcopy(model), BatchSampler(x, y, 8, seed=0), 1, 4, lambda s: 1e-3, zero1=True)
    n = model.num_params()
    assert full.optimizer_state_bytes_per_rank == 8 * n
    assert sharded.optimizer_state_bytes_per_rank == 8 * -(-n // 4)
    # ZeRO-1 replaces the all-reduce by a reduce-scatter + all-gather: the same bytes on the wire
    assert sharded.schedules[0].bytes_sent()[0] == pytest.approx(full.schedules[0].bytes_sent()[0], rel=1e-3)


def test_an_uneven_global_batch_is_refused(data):
    _, x, y = data
    with pytest.raises(ValueError, match="10 rows over 4 ranks"):
        dp.shard_rows(x[:10], y[:10], 0, 4)


@pytest.mark.parametrize("p", [1, 2, 4])
def test_tensor_parallel_gpt_gives_the_one_device_logits_and_gradients(data, p):
    tokenizer, x, y = data
    model = _model(tokenizer)
    split = tp.TensorParallelGPT(model, p)
    xb, yb = x[:4, :20], y[:4, :20]
    logits, loss = model(xb, yb)
    logits_tp, loss_tp = split(xb, yb)
    torch.testing.assert_close(logits_tp, logits, atol=1e-5, rtol=1e-5)
    loss.backward()
    loss_tp.backward()
    params = dict(model.named_parameters())
    for layer in range(2):
        for name in ("attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight"):
            torch.testing.assert_close(split.gathered_grad(layer, name), params[f"blocks.{layer}.{name}"].grad,
                                       atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(split.wte.weight.grad, model.wte.weight.grad, atol=1e-5, rtol=1e-4)
    assert split.blocks[0].all_reduces == 2  # two all-reduces per Block per forward


def test_tensor_parallel_needs_heads_that_split():
    with pytest.raises(ValueError, match="4 heads over 3 ranks"):
        tp.TensorParallelGPT(GPT(GPTConfig(n_layer=1, n_embd=32, n_head=4)), 3)


def test_column_then_row_parallel_linear_is_the_two_matmuls():
    import numpy as np
    rng = np.random.default_rng(0)
    x, w1, b1 = rng.standard_normal((5, 8)), rng.standard_normal((12, 8)), rng.standard_normal(12)
    w2, b2 = rng.standard_normal((6, 12)), rng.standard_normal(6)
    slices = tp.column_parallel_linear(x, w1, b1, 4)
    assert [s.shape for s in slices] == [(5, 3)] * 4
    out = tp.row_parallel_linear(slices, w2, b2)
    np.testing.assert_allclose(out[2], (x @ w1.T + b1) @ w2.T + b2, rtol=1e-12)


@pytest.mark.parametrize("stages,microbatches", [(2, 1), (4, 4), (4, 8), (3, 5), (1, 3)])
def test_1f1b_bubble_is_the_textbook_fraction(stages, microbatches):
    run = pp.schedule(stages, microbatches, forward_ns=1.0, backward_ns=2.0)
    assert run.total_ns == pytest.approx((microbatches + stages - 1) * 3.0)
    assert run.bubble_fraction == pytest.approx(pp.PipelineRun.textbook_bubble(stages, microbatches))
    assert run.peak_in_flight == [min(stages - s, microbatches) for s in range(stages)]
    gpipe = pp.schedule(stages, microbatches, 1.0, 2.0, kind="gpipe")
    assert gpipe.total_ns == pytest.approx(run.total_ns)  # the same bubble ...
    assert gpipe.peak_in_flight == [microbatches] * stages  # ... but every microbatch kept in memory


def test_pipeline_sends_lengthen_the_step_and_sit_on_their_own_track():
    run = pp.schedule(4, 8, 1.0, 2.0, send_ns=0.5)
    assert run.total_ns > 33.0
    assert any(i.engine == "stage0.cc" and i.opcode == "send" for i in run.timeline)


def test_pipeline_microbatches_through_stages_accumulate_the_full_batch_gradients(data):
    tokenizer, x, y = data
    model = _model(tokenizer, n_layer=4)
    xb, yb = x[:8, :20], y[:8, :20]
    _, loss = model(xb, yb)
    loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    got = pp.microbatch_gradients(model, xb, yb, stages=4, microbatches=4)
    assert got == pytest.approx(float(loss.detach()), rel=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-6, rtol=1e-4)


def test_memory_per_chip_counts_sixteen_bytes_per_parameter_plus_activations():
    m = S.MODELS["7B-class"]
    mem = S.memory_per_chip(m, batch_per_replica=1)
    assert mem.weights + mem.gradients + mem.optimizer == 16 * m.params
    assert S.memory_per_chip(m, 1, tp=8).weights == pytest.approx(mem.weights / 8)
    assert S.memory_per_chip(m, 1, dp=4, zero1=True).optimizer == pytest.approx(mem.optimizer / 4)
    assert not S.would_it_fit(m, T.TRN2_48XLARGE)["fits"]  # 7B with AdamW: over 96 GiB
    assert S.would_it_fit(S.MODELS["GPT-2 small (124M)"], T.TRN2_48XLARGE)["fits"]


def test_gpt_shape_counts_the_trnlab_models_parameters():
    tiny = S.MODELS["tiny GPT (trnlab)"]
    assert tiny.params == GPT(GPTConfig()).num_params()


def test_data_parallel_scales_while_the_all_reduce_hides_behind_backward():
    m = S.MODELS["GPT-2 small (124M)"]
    rows = S.scaling(m, T.TRN2_ULTRASERVER, 64, "dp")
    assert [r.chips for r in rows] == [1, 2, 4, 8, 16, 32, 64]
    assert rows[-1].tokens_per_second == pytest.approx(64 * rows[0].tokens_per_second, rel=0.05)
    # without overlap the all-reduce shows
    bare = S.estimate(m, T.TRN2_ULTRASERVER, 64, dp=64, overlap=0.0)
    assert bare.dp_ns > 0 and bare.communication_share > rows[-1].communication_share


def test_tensor_parallel_communication_grows_with_the_group():
    m = S.MODELS["7B-class"]
    shares = [r.communication_share for r in S.scaling(m, T.TRN2_48XLARGE, 8, "tp")]
    assert shares == sorted(shares) and shares[-1] > 0.05


def test_layouts_that_do_not_fit_the_machine_or_the_model_are_refused():
    m = S.MODELS["7B-class"]
    with pytest.raises(ValueError, match="needs 128 ranks; trn2.48xlarge has 16"):
        S.estimate(m, T.TRN2_48XLARGE, 128, dp=128)
    with pytest.raises(ValueError, match="32 heads over tp=3"):
        S.estimate(m, T.TRN2_48XLARGE, 8, tp=3)
