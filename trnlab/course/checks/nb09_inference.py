"""Checks for notebook 09, inference and deployment (cases / run beside the student / judge elsewhere).

The KV-cache size comes from the server's own `kv_cache_bytes`, the latency metrics from the
definitions the engine's `Request` uses (TPOT after the first token), the largest batch from the
measured table itself, the decode batch from the decode programs replayed on the simulated Trn2
(`decode_step_us`) — all computed in the judging process. While the student's function runs, the
package's versions of what it asks for are switched off.
"""

from __future__ import annotations

import math

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.model.gpt import GPTConfig
from trnlab.serve.kv_cache import kv_cache_bytes

NOTEBOOK = "09_inference_and_deployment"


# -- 1. the size of a KV cache ----------------------------------------------------------------------
@exercise("nb09_kv_cache_bytes", notebook=NOTEBOOK, points=2, answer="kv_cache_size",
          title="The KV cache size of a model",
          asks_for=("trnlab.serve.kv_cache.kv_cache_bytes", "trnlab.serve.kv_cache.KVCache.nbytes",
                    "trnlab.economics.fit.inference_memory"))
class KvCacheBytes:
    def cases(rng):
        # [n_layer, n_embd, positions, batch, bytes per element]: our model, a batch of it, GPT-2 small,
        # a 7B-class model, the smallest possible; then random models
        fixed = [[4, 64, 32, 1, 4], [4, 64, 32, 8, 4], [12, 768, 1024, 1, 2], [32, 4096, 4096, 16, 2], [1, 8, 1, 1, 1]]
        drawn = [[int(rng.integers(1, 97)), 8 * int(rng.integers(1, 1025)), int(rng.integers(1, 32769)),
                  int(rng.integers(1, 129)), int(rng.choice([1, 2, 4]))] for _ in range(4)]
        return fixed + drawn

    def run(kv_cache_size, case):
        return plain.integer(kv_cache_size(*case), "the KV cache size in bytes")

    def judge(case, got):
        n_layer, n_embd, positions, batch, nbytes = case
        expected = kv_cache_bytes(GPTConfig(n_layer=n_layer, n_embd=n_embd, n_head=1), positions, batch, nbytes)
        if got != expected:
            raise CheckFailed(
                f"expected {expected:,} bytes, got {got:,} for n_layer={n_layer}, n_embd={n_embd}, "
                f"positions={positions}, batch={batch}, bytes_per_element={nbytes} (every layer keeps a key AND a "
                f"value vector of n_embd numbers for every position of every sequence)")


# -- 2. TTFT, TPOT and end-to-end latency ---------------------------------------------------------
@exercise("nb09_latency_metrics", notebook=NOTEBOOK, points=2, answer="latency_metrics",
          title="TTFT, TPOT and end-to-end latency from token times",
          asks_for=("trnlab.serve.engine.Request.ttft_ns", "trnlab.serve.engine.Request.tpot_ns",
                    "trnlab.serve.engine.Request.e2e_ns", "trnlab.serve.engine.Request.latency"))
class LatencyMetrics:
    def cases(rng):
        # [arrival, token_times]: a steady answer, a one-token answer, two tokens, uneven gaps; then
        # random answers of 1 to 12 tokens
        fixed = [[0.0, [100.0, 130.0, 160.0, 190.0]], [50.0, [400.0]], [10.0, [20.0, 25.0]],
                 [0.0, [1000.0, 1010.0, 1040.0, 1050.0, 1100.0]]]
        drawn = []
        for _ in range(4):
            arrival = float(rng.integers(0, 2000)) / 2
            gaps = rng.integers(1, 400, int(rng.integers(1, 13))) / 2  # the first gap is the TTFT
            drawn.append([arrival, [float(t) for t in arrival + gaps.cumsum()]])
        return fixed + drawn

    def run(latency_metrics, case):
        arrival, tokens = case
        got = latency_metrics(arrival, list(tokens))
        if type(got) not in (tuple, list) or len(got) != 3:
            raise CheckFailed(f"expected a tuple (ttft, tpot, e2e) of three numbers, got {type(got).__name__} "
                              f"for arrival={arrival}, token_times={tokens}")
        return [plain.number(value, name) for value, name in zip(got, ("ttft", "tpot", "e2e"))]

    def judge(case, got):
        arrival, tokens = case
        # The data may not come from `run` (a notebook can publish its own): check its shape here too,
        # or zip would judge an empty list as correct.
        if type(got) is not list or len(got) != 3 or any(type(g) is not float for g in got):
            raise CheckFailed(f"expected a tuple (ttft, tpot, e2e) of three numbers, got {got!r:.80} "
                              f"for arrival={arrival}, token_times={tokens}")
        n = len(tokens)
        tpot = (tokens[-1] - tokens[0]) / (n - 1) if n > 1 else 0.0
        expected = (tokens[0] - arrival, tpot, tokens[-1] - arrival)
        if not all(math.isclose(g, e, rel_tol=1e-9, abs_tol=1e-9) for g, e in zip(got, expected)):
            raise CheckFailed(
                f"expected (ttft, tpot, e2e) = {expected}, got {tuple(got)} for arrival={arrival}, "
                f"token_times={tokens} (TPOT excludes the first token: the time after it, divided by the output "
                f"tokens minus one; a one-token answer has TPOT 0)")


# -- 3. the largest batch that meets a latency target ----------------------------------------------
# No asks_for: the package has no function that picks a batch size for a latency target.
@exercise("nb09_largest_batch", notebook=NOTEBOOK, points=2, answer="largest_batch",
          title="The largest batch that meets a latency target")
class LargestBatch:
    def cases(rng):
        # [[(batch, TPOT in µs), ...], target]: pairs, so that the dict keeps the order drawn
        table = [[1, 150.0], [2, 155.0], [4, 170.0], [8, 230.0], [16, 390.0]]
        fixed = [[table, 200.0], [table, 400.0],
                 [[[1, 150.0], [2, 155.0], [4, 170.0]], 100.0],                 # nothing meets it
                 [[[1, 150.0], [2, 210.0], [4, 190.0], [8, 260.0]], 200.0],      # not monotone: a bucket boundary
                 [[[8, 230.0], [1, 150.0], [4, 170.0]], 230.0]]                  # any order; the target itself is met
        drawn = []
        for _ in range(4):
            batches = sorted(int(b) for b in rng.choice([1, 2, 4, 8, 16, 32, 64], int(rng.integers(2, 7)), replace=False))
            # TPOT grows with the batch, with jitter so that a padded bucket can beat a smaller one
            tpots = [float(round(100 + 12 * b + rng.uniform(-60, 60), 1)) for b in batches]
            pairs = [[b, t] for b, t in zip(batches, tpots)]
            order = rng.permutation(len(pairs))
            target = float(rng.choice(tpots)) if rng.random() < 0.5 else float(round(rng.uniform(50, 900), 1))
            drawn.append([[pairs[i] for i in order], target])
        return fixed + drawn

    def run(largest_batch, case):
        pairs, target = case
        return plain.integer(largest_batch({b: t for b, t in pairs}, target), "the batch size")

    def judge(case, got):
        pairs, target = case
        expected = max((b for b, t in pairs if t <= target), default=0)
        if got != expected:
            tpot_us = {b: t for b, t in pairs}
            raise CheckFailed(
                f"expected {expected}, got {got} for tpot_us={tpot_us}, target_us={target} "
                f"(the largest batch whose TPOT is at most the target, looking at every batch; 0 if none meets it)")


# -- 4. schedule a decode batch: predict, then measure ---------------------------------------------
# The server runs one decode program per batch bucket (powers of two); a batch of b sequences runs in
# the smallest bucket >= b, padded. Every user's time per output token is that bucket's step time, and
# the decode throughput is b / step time. The judge replays the buckets' decode programs itself (on
# the simulated Trn2, the notebook's checkpoint, contexts up to DECODE_CONTEXT positions).
DECODE_TARGET, DECODE_CONTEXT, MAX_DECODE_BATCH = "trn2", 16, 16
THROUGHPUT_TARGET = 1.2      # the reference's tokens/s may be at most 120 % of the answer's


def _bucket(batch: int) -> int:
    return 1 << (batch - 1).bit_length()


_STEP_US: dict[int, float] = {}


def decode_step_us(bucket: int) -> float:
    """Simulated µs of one decode step of the notebook's model in `bucket` (replayed once per process)."""
    if bucket not in _STEP_US:
        from trnlab.model import load_checkpoint
        from trnlab.model.checkpoint import SIMULATED_CHECKPOINT
        from trnlab.serve.latency import measure_step
        from trnlab.serve.steps import CompiledBackend, default_cache_dir

        model, _ = load_checkpoint(SIMULATED_CHECKPOINT)
        backend = CompiledBackend(model, DECODE_TARGET, max_batch=MAX_DECODE_BATCH, cache_dir=default_cache_dir())
        _STEP_US[bucket] = measure_step(backend, "decode", (bucket, DECODE_CONTEXT))[0] / 1e3
    return _STEP_US[bucket]


def best_decode_batch(budget_us: float) -> tuple[int, float]:
    """The batch with the most tokens/s whose step meets the budget, and its tokens/s (0, 0.0 if none)."""
    best = (0, 0.0)
    for bucket in (1, 2, 4, 8, 16):
        step = decode_step_us(bucket)
        if step <= budget_us and bucket / step * 1e6 > best[1]:
            best = (bucket, bucket / step * 1e6)
    return best


# No asks_for: the package has no function that picks a decode batch; `measure_step` is the
# measurement the statement hands the student.
@exercise("nb09_decode_batch", notebook=NOTEBOOK, points=3, answer="decode_batch",
          title="Schedule a decode batch for a TPOT budget (predict, then measure)")
class DecodeBatch:
    def cases(rng):
        # budgets in µs: between buckets 8 and 16, between buckets 4 and 8, just above batch 1's step, a
        # generous one, then random
        fixed = [400.0, 250.0, 140.0, 600.0]
        return fixed + [float(round(rng.uniform(130.0, 590.0), 1)) for _ in range(2)]

    def run(decode_batch, budget_us):
        return plain.integer(decode_batch(budget_us), "the decode batch size")

    def judge(budget_us, got):
        if type(got) is not int:
            raise CheckFailed(f"TPOT budget {budget_us:g} µs: expected a whole number of sequences, got {got!r:.60}")
        best, best_tps = best_decode_batch(budget_us)
        if best == 0:
            if got != 0:
                raise CheckFailed(f"TPOT budget {budget_us:g} µs: even one sequence's decode step takes "
                                  f"{decode_step_us(1):.1f} µs, so no batch meets it; expected 0, got {got}")
            return
        if not 1 <= got <= MAX_DECODE_BATCH:
            raise CheckFailed(f"TPOT budget {budget_us:g} µs: expected a batch of 1 to {MAX_DECODE_BATCH} "
                              f"sequences (the server's largest bucket), got {got}")
        bucket = _bucket(got)
        step = decode_step_us(bucket)
        padding = f" ({got} sequences padded to bucket {bucket})" if bucket != got else ""
        if step > budget_us:
            raise CheckFailed(f"TPOT budget {budget_us:g} µs broken — expected a step of at most {budget_us:g} µs; "
                              f"batch {got}'s decode step{padding} takes {step:.1f} µs, "
                              f"{step / budget_us - 1:.0%} over the budget")
        tps = got / step * 1e6
        if best_tps > THROUGHPUT_TARGET * tps:
            waste = (f"; {bucket - got} of the bucket's {bucket} rows are padding, paid for and thrown away"
                     if bucket != got else "; a larger bucket still meets the budget")
            raise CheckFailed(f"TPOT budget {budget_us:g} µs: throughput target missed — expected at least "
                              f"{best_tps / THROUGHPUT_TARGET:,.0f} tokens/s (the reference's {best_tps:,.0f} is at most "
                              f"{THROUGHPUT_TARGET:.0%} of yours); batch {got} meets the budget ({step:.1f} µs per step) "
                              f"but makes {tps:,.0f} ({best_tps / tps:.0%}){padding}{waste}")
