"""Serving on compiled programs (trnlab.serve.steps): one prefill program per length bucket and one
decode program per (batch, cache) bucket, built by trnlab.compiler, taking the KV cache as an input,
replayed on the simulated NeuronCore; compiled once per process and stored as artifacts."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from trnlab.data import load_split
from trnlab.data.tasks import model_prompt, read_answer, task_of
from trnlab.model import ask_many, load_checkpoint
from trnlab.serve import steps
from trnlab.serve.steps import CompiledBackend, compile_step, get_step
from trnlab.serve.engine import generate
from trnlab.serve.kv_cache import KVCache

MODEL, TOKENIZER = load_checkpoint()
TEST = load_split("test")


def encode(prompt: str) -> list[int]:
    return TOKENIZER.encode_prompt(model_prompt(task_of(prompt), prompt))


def test_decode_program_takes_the_kv_cache_as_input_and_calls_decode_attention():
    program = compile_step(MODEL, "decode", (2, 16), "trn2").program
    inputs = {name: shape for name, shape, _ in program.inputs}
    n_layer, C = MODEL.config.n_layer, MODEL.config.n_embd
    caches = [shape for name, shape in inputs.items() if name.startswith("cache")]
    assert caches == [[2, 16, C]] * (2 * n_layer)                      # K and V of every layer: [B, L, C]
    assert [c.kernel for c in program.calls].count("decode_attention") == n_layer
    assert all(c.kind == "kernel" for c in program.calls if c.kind != "view")    # nothing falls back to the host


def test_prefill_program_is_the_models_own_graph_with_fused_attention():
    program = compile_step(MODEL, "prefill", (1, 8), "trn2").program
    kernels = [c.kernel for c in program.calls if c.kind == "kernel"]
    assert kernels.count("causal_attention_qkv") == MODEL.config.n_layer
    assert [list(s) for s in (program.inputs[0][1],)] == [[1, 8]]


def test_decode_program_matches_the_pytorch_reference_for_ragged_lengths():
    from trnlab.compiler.ops import decode_attention_reference
    step = get_step(MODEL, "decode", (2, 8), "trn2")
    rng = np.random.default_rng(0)
    C, n_layer = MODEL.config.n_embd, MODEL.config.n_layer
    cache = [rng.standard_normal((2, 8, C)).astype(np.float32) for _ in range(2 * n_layer)]
    bias = np.zeros((2, 8), np.float32)
    bias[0, 3:] = -1.0e30                                              # sequence 0 has 3 positions, 1 has 8
    ids, positions = np.array([5, 9], np.int32), np.array([3, 8], np.int32)
    (logits, *qkvs), run = step.run(ids, positions, bias, *cache)
    module = steps.DecodeStep(MODEL)
    with torch.no_grad():
        expected = module(torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(positions.astype(np.int64)),
                          torch.from_numpy(bias), *map(torch.from_numpy, cache))
    np.testing.assert_allclose(logits, expected[0].numpy(), rtol=1e-4, atol=1e-4)
    for got, want in zip(qkvs, expected[1:]):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
    assert run.latency_ns > 0
    qkv = torch.randn(1, 3 * C)                                         # an empty cache: attention is v_new
    y = decode_attention_reference(qkv, torch.zeros(1, 2, C), torch.zeros(1, 2, C),
                                   torch.full((1, 2), -1.0e30), MODEL.config.n_head)
    torch.testing.assert_close(y, qkv[:, 2 * C:])


def test_a_larger_batch_takes_longer_per_step_but_less_per_sequence():
    backend = CompiledBackend(MODEL, "trn2", max_batch=8)
    times = {}
    for batch in (1, 8):
        cache = KVCache.empty(MODEL.config, batch)
        cache.lengths[:] = 12
        times[batch] = backend.decode([4] * batch, list(range(batch)), cache).simulated_ns
    assert times[1] < times[8] < 8 * times[1]


def test_steps_are_compiled_once_then_replayed_and_reloaded_from_artifacts(tmp_path, monkeypatch):
    backend = CompiledBackend(MODEL, "trn1", max_batch=2, cache_dir=tmp_path)
    cache = KVCache.empty(MODEL.config, 1)
    first = backend.prefill(encode("407+38"), 0, cache)
    step = backend.step("prefill", first.bucket)
    assert step.source == "compiled" and backend.step("prefill", first.bucket) is step   # once per process
    files = list(tmp_path.rglob("trn1-prefill-1x16.neff"))
    assert len(files) == 1
    monkeypatch.setattr(steps, "_STEPS", {})                         # a new process: read the artifact
    monkeypatch.setattr(steps, "_CAPTURED", {})
    monkeypatch.setattr(steps, "compile_step", lambda *a, **k: pytest.fail("compiled again"))
    again = CompiledBackend(MODEL, "trn1", max_batch=2, cache_dir=tmp_path)
    second = again.prefill(encode("407+38"), 0, KVCache.empty(MODEL.config, 1))
    assert again.step("prefill", first.bucket).source == "artifact"
    np.testing.assert_array_equal(first.logits, second.logits)
    assert second.simulated_ns == first.simulated_ns


def test_a_corrupt_artifact_is_compiled_again(tmp_path, monkeypatch):
    fingerprint = steps.model_fingerprint(MODEL)
    path = tmp_path / fingerprint / "trn3-prefill-1x8.neff"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an artifact")
    monkeypatch.setattr(steps, "_STEPS", {})
    step = get_step(MODEL, "prefill", (1, 8), "trn3", cache_dir=tmp_path)
    assert step.source == "compiled" and path.read_bytes()[:2] == b"PK"   # rewritten as a zip artifact


def test_a_step_refuses_inputs_of_another_bucket():
    step = get_step(MODEL, "prefill", (1, 8), "trn2")
    with pytest.raises(ValueError, match=r"compiled for \(1, 8\)"):
        step.run(np.zeros((1, 16), np.int32))


@pytest.mark.skipif(not os.environ.get("TRNLAB_ALL_PROMPTS"), reason="TRNLAB_ALL_PROMPTS=1 runs all 2,000 prompts")
def test_compiled_greedy_answers_equal_pytorch_greedy_on_the_whole_test_split():
    prompts = [e.prompt for e in TEST]
    requests = generate(CompiledBackend(MODEL, "trn2", max_batch=16), [encode(p) for p in prompts],
                        TOKENIZER.eos_id, max_batch=16)
    got = [read_answer(task_of(p), TOKENIZER.decode_answer(r.output_ids)) for r, p in zip(requests, prompts)]
    assert got == ask_many(MODEL, TOKENIZER, prompts)


def test_the_whole_chain_gives_one_answer_at_every_stage():
    from trnlab.serve.chain import whole_chain
    report = whole_chain("407+38", target="trn2")
    assert report.answers == {"pytorch": "445", "simulated": "445", "deployed": "445"}
    assert [stage for stage, _ in report.stages] == ["1 data", "2 model", "3 compile", "4 simulated trn2", "5 deployed"]
    assert report.latency["ttft_ms"] > 0 and report.latency["output_tokens"] == 5


def test_the_runtime_loads_the_decode_artifact_and_agrees_with_the_one_program_replay(tmp_path):
    from trnlab.runtime import Runtime
    compiled_decode = compile_step(MODEL, "decode", (1, 8), "trn2")
    path = compiled_decode.save(tmp_path / "decode.neff")
    rng = np.random.default_rng(1)
    C, n_layer = MODEL.config.n_embd, MODEL.config.n_layer
    cache = [rng.standard_normal((1, 8, C)).astype(np.float32) for _ in range(2 * n_layer)]
    bias = np.zeros((1, 8), np.float32)
    inputs = (np.array([7], np.int32), np.array([8], np.int32), bias, *cache)
    by_runtime = Runtime("trn2").load(path).run(*inputs)                   # kernel by kernel (trnlab.runtime)
    replayed, _ = get_step(MODEL, "decode", (1, 8), "trn2").run(*inputs)   # one program
    for a, b in zip(by_runtime.outputs, replayed):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_bucket_timed_backend_gives_cpu_values_and_the_compiled_programs_step_times():
    from trnlab.serve.backend import Backend, CpuBackend
    from trnlab.serve.latency import BucketTimedBackend, measure_step
    with pytest.raises(TypeError, match="abstract"):
        Backend(MODEL)                                                 # a backend must supply both forwards
    timing = CompiledBackend(MODEL, "trn2", max_batch=2)
    timed, cpu = BucketTimedBackend(timing), CpuBackend(MODEL, max_batch=2)
    prompts = [encode(p.prompt) for p in TEST[:2]]
    caches = [KVCache.empty(MODEL.config, 2) for _ in range(2)]
    firsts = [b.prefill(prompts[0], 0, c) for b, c in zip((timed, cpu), caches)]
    np.testing.assert_array_equal(firsts[0].logits, firsts[1].logits)
    assert firsts[0].simulated_ns == measure_step(timing, "prefill", firsts[0].bucket)[0] > 0
    for b, c in zip((timed, cpu), caches):
        b.prefill(prompts[1], 1, c)
    steps = [b.decode([3, 4], [0, 1], c) for b, c in zip((timed, cpu), caches)]
    np.testing.assert_array_equal(steps[0].logits, steps[1].logits)
    assert steps[0].bucket == steps[1].bucket
    assert (steps[0].simulated_ns, steps[0].kernels) == measure_step(timing, "decode", steps[0].bucket)
    assert steps[0].simulated_ns > 0 and steps[1].simulated_ns == 0.0


def test_with_the_kv_cache_a_token_costs_less_than_a_prefill_of_the_context_and_the_plot_shows_both():
    """The cache's point, on the simulator: a decode step against L cached positions is cheaper than
    the prefill of L tokens a generation without the cache pays for every token (a view between two
    kernels no longer hides the RAW dependency that made the prefill look faster than one decode)."""
    import matplotlib
    matplotlib.use("Agg")
    from trnlab.serve.latency import context_sweep
    from trnlab.viz.serving import plot_context_sweep
    points = context_sweep(MODEL, "trn2", lengths=(8, 32), cache_dir=None)
    assert [p.positions for p in points] == [8, 32]
    for p in points:
        assert p.decode_us < p.prefill_us, p
        assert p.saving == pytest.approx(p.prefill_us / p.decode_us)
    figure = plot_context_sweep({"course model": points})
    assert len(figure.axes[0].lines) == 2                  # prefill and decode
    assert list(figure.axes[0].lines[1].get_xdata()) == [8, 32]
