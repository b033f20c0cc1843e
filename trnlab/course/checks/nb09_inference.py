"""Checks for notebook 09, inference and deployment."""

from __future__ import annotations

import math

from trnlab.course.exercises import CheckFailed, exercise
from trnlab.model.gpt import GPTConfig
from trnlab.serve.kv_cache import kv_cache_bytes


@exercise("nb09_kv_cache_bytes", notebook="09_inference_and_deployment", points=2, answer="kv_cache_size",
          title="The KV cache size of a model")
def check_kv_cache_bytes(student) -> None:
    cases = [  # (n_layer, n_embd, positions, batch, bytes per element)
        (4, 64, 32, 1, 4), (4, 64, 32, 8, 4), (12, 768, 1024, 1, 2), (32, 4096, 4096, 16, 2), (1, 8, 1, 1, 1)]
    for n_layer, n_embd, positions, batch, nbytes in cases:
        config = GPTConfig(n_layer=n_layer, n_embd=n_embd, n_head=1)
        expected = kv_cache_bytes(config, positions, batch, nbytes)
        got = student(n_layer, n_embd, positions, batch, nbytes)
        if got != expected:
            raise CheckFailed(
                f"expected {expected:,} bytes, got {got!r} for n_layer={n_layer}, n_embd={n_embd}, "
                f"positions={positions}, batch={batch}, bytes_per_element={nbytes} (every layer keeps a key AND a "
                f"value vector of n_embd numbers for every position of every sequence)")


@exercise("nb09_latency_metrics", notebook="09_inference_and_deployment", points=2, answer="latency_metrics",
          title="TTFT, TPOT and end-to-end latency from token times")
def check_latency_metrics(student) -> None:
    cases = [(0.0, [100.0, 130.0, 160.0, 190.0]), (50.0, [400.0]), (10.0, [20.0, 25.0]),
             (0.0, [1000.0, 1010.0, 1040.0, 1050.0, 1100.0])]
    for arrival, tokens in cases:
        n = len(tokens)
        ttft = tokens[0] - arrival
        tpot = (tokens[-1] - tokens[0]) / (n - 1) if n > 1 else 0.0
        expected = (ttft, tpot, tokens[-1] - arrival)
        got = student(arrival, list(tokens))
        if not (isinstance(got, (tuple, list)) and len(got) == 3 and
                all(math.isclose(g, e, abs_tol=1e-9) for g, e in zip(got, expected))):
            raise CheckFailed(
                f"expected (ttft, tpot, e2e) = {expected}, got {got!r} for arrival={arrival}, token_times={tokens} "
                f"(TPOT excludes the first token: the time after it, divided by the output tokens minus one; "
                f"a one-token answer has TPOT 0)")


@exercise("nb09_largest_batch", notebook="09_inference_and_deployment", points=2, answer="largest_batch",
          title="The largest batch that meets a latency target")
def check_largest_batch(student) -> None:
    cases = [
        ({1: 150.0, 2: 155.0, 4: 170.0, 8: 230.0, 16: 390.0}, 200.0, 4),
        ({1: 150.0, 2: 155.0, 4: 170.0, 8: 230.0, 16: 390.0}, 400.0, 16),
        ({1: 150.0, 2: 155.0, 4: 170.0}, 100.0, 0),                 # nothing meets it
        ({1: 150.0, 2: 210.0, 4: 190.0, 8: 260.0}, 200.0, 4),        # not monotone: a bucket boundary
        ({8: 230.0, 1: 150.0, 4: 170.0}, 230.0, 8),                  # any order; the target itself is met
    ]
    for tpot_us, target_us, expected in cases:
        got = student(dict(tpot_us), target_us)
        if got != expected:
            raise CheckFailed(
                f"expected {expected}, got {got!r} for tpot_us={tpot_us}, target_us={target_us} (the largest batch "
                f"whose TPOT is at most the target, looking at every batch; 0 if none meets it)")
