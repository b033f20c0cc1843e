"""Serving with a KV cache: the cached forwards match the model, greedy answers match PyTorch's greedy
path, sampling is seeded, and continuous batching never loses or duplicates a request."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnlab.data import load_split
from trnlab.data.tasks import model_prompt, read_answer, task_of
from trnlab.model import ask_many, load_checkpoint
from trnlab.serve.backend import CpuBackend, make_backend
from trnlab.serve.engine import Engine, Request, generate
from trnlab.serve.kv_cache import KVCache, bucket_for, buckets, kv_cache_bytes
from trnlab.serve.sampling import SamplingParams, filtered_probabilities

MODEL, TOKENIZER = load_checkpoint()
TEST = load_split("test")


def encode(prompt: str) -> list[int]:
    return TOKENIZER.encode_prompt(model_prompt(task_of(prompt), prompt))


def answers(requests, prompts) -> list[str]:
    return [read_answer(task_of(p), TOKENIZER.decode_answer(r.output_ids)) for r, p in zip(requests, prompts)]


def test_buckets_are_powers_of_two_up_to_the_context():
    assert buckets(32, 8) == [8, 16, 32]
    assert buckets(8) == [1, 2, 4, 8]
    assert buckets(24, 8) == [8, 16, 24]            # the context itself is always a bucket
    assert bucket_for(9, [8, 16, 32]) == 16 and bucket_for(8, [8, 16, 32]) == 8
    with pytest.raises(ValueError, match="no bucket holds 33"):
        bucket_for(33, [8, 16, 32])


def test_kv_cache_size_is_two_layers_positions_channels_bytes():
    config = MODEL.config                           # 4 layers, 64 channels
    assert kv_cache_bytes(config, 32) == 2 * 4 * 32 * 64 * 4
    assert KVCache.empty(config, 3).nbytes == kv_cache_bytes(config, config.block_size, batch=3)


@pytest.mark.parametrize("device", ["cpu", "trn2"])
def test_prefill_then_decode_give_the_models_logits(device):
    backend = make_backend(device, MODEL, max_batch=4)
    cache = KVCache.empty(MODEL.config, 2)
    sequences = [encode("407+38"), encode("reverse kite")]
    for slot, ids in enumerate(sequences):
        step = backend.prefill(ids, slot, cache)
        with torch.no_grad():
            expected = MODEL(torch.tensor([ids]))[0][0, -1].numpy()
        np.testing.assert_allclose(step.logits[0], expected, rtol=1e-4, atol=1e-4)
        assert step.bucket == (1, 16) and (step.simulated_ns > 0) == (device != "cpu")
    for _ in range(3):                              # both sequences decode together, lengths differ
        tokens = [int(np.argmax(MODEL(torch.tensor([s]))[0][0, -1].detach().numpy())) for s in sequences]
        step = backend.decode(tokens, [0, 1], cache)
        for s, t in zip(sequences, tokens):
            s.append(t)
        with torch.no_grad():
            expected = np.stack([MODEL(torch.tensor([s]))[0][0, -1].numpy() for s in sequences])
        np.testing.assert_allclose(step.logits, expected, rtol=1e-4, atol=1e-4)
        assert step.bucket[0] == 2
    assert cache.lengths.tolist() == [len(s) for s in sequences]


def test_greedy_answers_with_the_cache_equal_pytorch_greedy_on_the_whole_test_split():
    prompts = [e.prompt for e in TEST]
    assert len(prompts) == 2000
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = ask_many(MODEL, TOKENIZER, prompts)
        requests = generate(CpuBackend(MODEL), [encode(p) for p in prompts], TOKENIZER.eos_id, max_batch=32)
    finally:
        torch.set_num_threads(threads)
    assert answers(requests, prompts) == expected


def test_greedy_answers_on_the_simulated_trainium_equal_pytorch_greedy_on_a_fixed_sample():
    # the whole split takes minutes on the simulator: benchmarks/bench_serve.py --full-split or
    # TRNLAB_ALL_PROMPTS=1 (tests/test_serve_compiled.py) runs it
    sample = TEST[::125]                            # 16 prompts, every task
    prompts = [e.prompt for e in sample]
    requests = generate(make_backend("trn2", MODEL, max_batch=8), [encode(p) for p in prompts], TOKENIZER.eos_id,
                        max_batch=8)
    assert answers(requests, prompts) == ask_many(MODEL, TOKENIZER, prompts)


def test_sampling_is_reproducible_with_a_seed_and_independent_of_the_batch():
    params = SamplingParams(temperature=1.5, top_k=10, top_p=0.95, seed=7)
    backend = CpuBackend(MODEL)
    alone = generate(backend, [encode("sort 5213")], TOKENIZER.eos_id, params)[0].output_ids
    again = generate(backend, [encode("sort 5213")], TOKENIZER.eos_id, params)[0].output_ids
    with_others = generate(backend, [encode("12+5"), encode("sort 5213"), encode("reverse ab")],
                           TOKENIZER.eos_id, params)[1].output_ids
    assert alone == again == with_others
    other_seeds = {tuple(generate(backend, [encode("sort 5213")], TOKENIZER.eos_id,
                                  SamplingParams(temperature=5.0, seed=s))[0].output_ids) for s in range(8)}
    assert len(other_seeds) > 1                     # a high temperature does sample: seeds differ


@settings(suppress_health_check=[HealthCheck.too_slow])     # drawing floats is slow on a loaded machine, not wrong
@given(logits=st.lists(st.floats(-20, 20), min_size=2, max_size=12), top_k=st.integers(0, 12),
       top_p=st.floats(0.01, 1.0), temperature=st.floats(0.1, 3.0))
def test_top_k_and_top_p_keep_the_most_likely_tokens_and_renormalise(logits, top_k, top_p, temperature):
    logits = np.array(logits)
    p = filtered_probabilities(logits, SamplingParams(temperature, top_k, top_p))
    assert p.sum() == pytest.approx(1.0) and (p >= 0).all()
    full = filtered_probabilities(logits, SamplingParams(temperature))
    kept = np.flatnonzero(p)
    assert full[kept].max() == full.max()                              # a most likely token always survives
    if top_k:
        assert len(kept) <= top_k
    dropped = np.setdiff1d(np.arange(len(logits)), kept)
    if len(dropped):                                                   # nothing dropped beats something kept
        assert full[dropped].max() <= full[kept].min()
    if not top_k:                                                      # top-p alone: the kept mass reaches p
        assert full[kept].sum() >= top_p - 1e-9


PROMPTS = ["12+5", "407+38", "reverse kite", "sort 52819", "999-1", "reverse ab", "sort 000", "5+5"]
SOLO = {p: generate(CpuBackend(MODEL), [encode(p)], TOKENIZER.eos_id)[0].output_ids for p in PROMPTS}


@settings(max_examples=25, deadline=None)
@given(arrivals=st.lists(st.tuples(st.sampled_from(PROMPTS), st.floats(0, 2e6), st.none() | st.integers(1, 4),
                                   st.booleans()), min_size=1, max_size=12),
       max_batch=st.integers(1, 5))
def test_continuous_batching_answers_every_request_exactly_once(arrivals, max_batch):
    """Requests arrive at any moment, with any max_tokens, some cancelled while running: each live
    request is answered exactly once with its solo greedy answer (cut at max_tokens), none is lost, and
    the running batch never exceeds max_batch."""
    backend = CpuBackend(MODEL, max_batch=8)
    for name in ("prefill", "decode"):               # a stand-in device time of 0.1 ms per step
        method = getattr(backend, name)
        def timed(*args, _method=method):
            result = _method(*args)
            result.simulated_ns = 1e5
            return result
        setattr(backend, name, timed)
    engine = Engine(backend, TOKENIZER.eos_id, max_batch=max_batch)
    requests = [engine.submit(Request(encode(p), SamplingParams(max_tokens=m), arrival_ns=t))
                for p, t, m, _ in arrivals]
    to_cancel = {r for r, (_, _, _, cancel) in zip(requests, arrivals) if cancel}
    finishes: dict[str, int] = {}
    seen_tokens: dict[str, list[int]] = {r.id: [] for r in requests}
    steps = 0
    while not engine.idle:
        for event in engine.step():
            assert event.request.finish_reason != "cancelled"
            seen_tokens[event.request.id].append(event.token_id)
            if event.finish_reason is not None:
                finishes[event.request.id] = finishes.get(event.request.id, 0) + 1
        assert len(engine.running) <= max_batch
        assert sorted(engine.free_slots + [r.slot for r in engine.running]) == list(range(max_batch))
        steps += 1
        for r in list(to_cancel):                     # cancel after the request's first step in the batch
            if r.output_ids and not r.finished:
                assert engine.cancel(r)
                to_cancel.discard(r)
        assert steps < 1000, "the engine makes no progress"
    for request, (prompt, _, max_tokens, _) in zip(requests, arrivals):
        assert request.finished
        assert seen_tokens[request.id] == request.output_ids          # every token was reported, once
        if request.finish_reason == "cancelled":
            assert request.id not in finishes
            continue
        assert finishes[request.id] == 1
        expected = SOLO[prompt][:max_tokens] if max_tokens else SOLO[prompt]
        assert request.output_ids == expected
        assert request.token_ns[0] >= request.arrival_ns                # nobody is answered before arriving
        assert request.e2e_ns == pytest.approx(request.ttft_ns + request.tpot_ns * (len(request.output_ids) - 1))


def test_latency_follows_the_step_times():
    backend = make_backend("trn2", MODEL, max_batch=4)
    engine = Engine(backend, TOKENIZER.eos_id, max_batch=4)
    request = engine.submit(Request(encode("407+38")))
    engine.run()
    prefill, *decodes = engine.steps
    assert prefill.kind == "prefill" and all(s.kind == "decode" for s in decodes)
    assert request.ttft_ns == pytest.approx(prefill.end_ns)                # arrived at 0, first token after prefill
    assert len(decodes) == len(request.output_ids) - 1
    assert request.tpot_ns == pytest.approx(np.mean([s.end_ns - s.start_ns for s in decodes]))
    assert request.latency()["output_tokens"] == len(request.output_ids)
