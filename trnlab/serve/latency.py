"""Latency against batch size on Trn1/Trn2/Trn3, and where prefill and decode sit on the roofline.

A compiled program's simulated time depends on its shapes, not on the values it reads, so a step's
time is a function of its bucket alone. `BucketTimedBackend` uses that: values come from one backend
(the fast PyTorch one) and each step's time from the compiled program of its bucket
(`trnlab.serve.steps`), replayed once per (kind, bucket) on that simulated chip and then reused.
That makes sweeps over batch sizes and generations quick in wall time while the times are the
simulator's. (`Service` and `python -m trnlab ask` replay every step on the simulator.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnlab.model.gpt import GPT
from trnlab.serve.backend import Backend, CpuBackend, StepResult
from trnlab.serve.engine import Engine, Request
from trnlab.serve.kv_cache import KVCache
from trnlab.serve.sampling import SamplingParams
from trnlab.serve.steps import CompiledBackend, default_cache_dir


class BucketTimedBackend(Backend):
    """Values from `values` (default: CpuBackend), step times of `timing` measured once per bucket."""

    def __init__(self, timing: CompiledBackend, values: Backend | None = None):
        super().__init__(timing.model, timing.max_batch)
        self.timing = timing
        self.values = values or CpuBackend(timing.model, timing.max_batch)
        self.name, self.device = f"bucket-timed {timing.target}", timing.target
        self.times: dict[tuple[str, tuple[int, int]], tuple[float, list]] = {}

    # values from `values`' padded forwards, times from the table (each bucket measured once)
    def _prefill_forward(self, ids: np.ndarray):
        logits, keys, values, _, _ = self.values._prefill_forward(ids)
        return (logits, keys, values, *self._time("prefill", (1, len(ids))))

    def _decode_forward(self, ids, positions, keys, values, bias):
        logits, new_keys, new_values, _, _ = self.values._decode_forward(ids, positions, keys, values, bias)
        return (logits, new_keys, new_values, *self._time("decode", (len(ids), keys.shape[2])))

    def _time(self, kind: str, bucket: tuple[int, int]) -> tuple[float, list]:
        key = (kind, bucket)
        if key not in self.times:
            self.times[key] = measure_step(self.timing, *key)
        ns, kernels = self.times[key]
        return ns, list(kernels)


def measure_step(backend: CompiledBackend, kind: str, bucket: tuple[int, int]) -> tuple[float, list]:
    """Simulated ns and kernel list of one step of `kind` in `bucket` = (batch, positions), on placeholder data."""
    batch, positions = bucket
    config = backend.config
    cache = KVCache.empty(config, batch)
    if kind == "prefill":
        result = backend.prefill([0] * positions, 0, cache)
    else:
        cache.lengths[:] = min(positions, config.block_size - 1)         # lands in the same cache bucket
        result = backend.decode([0] * batch, list(range(batch)), cache)
    if result.bucket != bucket:
        raise ValueError(f"measured bucket {result.bucket}, asked for {bucket}")
    return result.simulated_ns, result.kernels


@dataclass(frozen=True)
class BatchLatency:
    """B identical requests arriving together, served by the continuous-batching engine."""
    device: str
    batch: int
    output_tokens: int          # per request
    ttft_ms: float              # mean over the requests
    tpot_ms: float
    e2e_ms: float
    output_tokens_per_s: float  # all requests' output tokens / time until the last one finished


def batch_latency(backend: Backend, prompt_ids: list[int], batch: int, eos_id: int,
                  max_tokens: int | None = None) -> BatchLatency:
    engine = Engine(backend, eos_id, max_batch=batch)
    requests = [engine.submit(Request(list(prompt_ids), SamplingParams(max_tokens=max_tokens)))
                for _ in range(batch)]
    engine.run()
    tokens = sum(len(r.output_ids) for r in requests)
    return BatchLatency(backend.device, batch, len(requests[0].output_ids),
                        float(np.mean([r.ttft_ns for r in requests])) / 1e6,
                        float(np.mean([r.tpot_ns for r in requests])) / 1e6,
                        float(np.mean([r.e2e_ns for r in requests])) / 1e6,
                        tokens / (engine.clock_ns / 1e9))


def latency_table(model: GPT, prompt_ids: list[int], eos_id: int, batches=(1, 2, 4, 8, 16),
                  targets=("trn1", "trn2", "trn3"), max_tokens: int | None = None,
                  cache_dir="default") -> list[BatchLatency]:
    """BatchLatency for every target and batch size (step times from the simulator, per bucket);
    compiled buckets are kept in `cache_dir` ("default": `compiled.default_cache_dir()`, None: nowhere)."""
    cache_dir = default_cache_dir() if cache_dir == "default" else cache_dir
    rows = []
    for target in targets:
        backend = BucketTimedBackend(CompiledBackend(model, target, max_batch=max(batches), cache_dir=cache_dir))
        rows += [batch_latency(backend, prompt_ids, b, eos_id, max_tokens) for b in batches]
    return rows


@dataclass(frozen=True)
class ContextPoint:
    """One context length: the prefill of that many tokens (TTFT's device part) against one decode
    step attending to that many cached positions (TPOT's); a generation without a cache pays a
    prefill of the whole sequence for every token."""
    positions: int
    prefill_us: float
    decode_us: float

    @property
    def saving(self) -> float:
        """How many times cheaper a token is with the cache than without (prefill / decode)."""
        return self.prefill_us / self.decode_us


def context_sweep(model: GPT, target: str = "trn2", lengths=None, cache_dir="default") -> list[ContextPoint]:
    """Simulated prefill and decode (batch 1) at each context length (default: the model's buckets).
    A decode step attends to at most block_size - 1 cached positions, so the last bucket's decode
    is measured at that length (the same program)."""
    cache_dir = default_cache_dir() if cache_dir == "default" else cache_dir
    backend = CompiledBackend(model, target, max_batch=1, cache_dir=cache_dir)
    lengths = list(lengths or backend.length_buckets)
    return [ContextPoint(L, measure_step(backend, "prefill", (1, L))[0] / 1e3,
                         measure_step(backend, "decode", (1, L))[0] / 1e3) for L in lengths]


@dataclass(frozen=True)
class StepProfile:
    """One prefill or decode step's program: the numbers a roofline point needs."""
    kind: str
    bucket: tuple[int, int]
    flops: float               # issued on the engines (the Tensor engine's transposes included)
    model_flops: float         # what the model's math needs (trnlab.model.gpt.layer_costs)
    hbm_bytes: float
    ns: float
    peak_flops: float          # of one core for the dtype the kernels multiplied (fp32 here)
    hbm_bandwidth: float       # bytes/s of one core's share of HBM

    @property
    def intensity(self) -> float:
        """Model FLOPs per HBM byte."""
        return self.model_flops / self.hbm_bytes

    @property
    def achieved_flops(self) -> float:
        return self.model_flops / (self.ns * 1e-9)


def step_profile(model: GPT, target: str, kind: str, bucket: tuple[int, int], cache_dir="default") -> StepProfile:
    """Replay one step's compiled program and read its profile (one program: the whole step)."""
    from trnlab.model.gpt import layer_costs

    cache_dir = default_cache_dir() if cache_dir == "default" else cache_dir
    backend = CompiledBackend(model, target, max_batch=bucket[0], keep_runs=True, cache_dir=cache_dir)
    ns, _ = measure_step(backend, kind, bucket)
    profile = backend.last_run.profile(dtype="float32")
    batch, positions = bucket
    if kind == "prefill":
        model_flops = sum(c.flops for c in layer_costs(model.config, positions))
    else:                                # one token per sequence, attending to `positions` cached ones
        C, n_layer, V = model.config.n_embd, model.config.n_layer, model.config.vocab_size
        per_token = n_layer * (2 * C * 3 * C + 2 * C * C + 2 * 2 * C * 4 * C + 2 * 2 * (positions + 1) * C) + 2 * C * V
        model_flops = batch * per_token
    return StepProfile(kind, bucket, profile.flops, float(model_flops), profile.hbm_bytes, ns, profile.peak_flops,
                       profile.hbm_bandwidth)
