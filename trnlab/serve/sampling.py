"""Picking the next token from the logits: greedy, or a seeded draw with temperature, top-k and top-p.

The same four knobs as NxD Inference's on-device sampling and OpenAI's API (greedy is the default):

    temperature 0      greedy: the most likely token (the first one on a tie, as torch.argmax)
    temperature t > 0  softmax(logits / t): t < 1 sharpens, t > 1 flattens
    top_k k            keep only the k most likely tokens (None or 0: all)
    top_p p            keep the fewest most-likely tokens whose probabilities sum to at least p
                       ("nucleus"; 1.0: all)

Sampling runs on the host in NumPy, one `numpy.random.Generator` per request seeded from the
request's `seed`, so the same request with the same seed gets the same answer whatever else is in
its decode batch.

Every temperature in [0, 2] the HTTP API accepts can be sampled: a temperature so small that
logits / T overflows (5e-324) is computed as (logits − max) / T instead, which is the same
distribution (the most likely token gets all of it). A row that still gives no distribution (the
model produced NaN) raises `SamplingError` for that request only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class SamplingError(ValueError):
    """The logits of one request give no probability distribution (non-finite values)."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = None  # None: until <eos> or the context is full

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 or None: no limit), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def filtered_probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution a sampled token is drawn from: softmax(logits / T), then top-k, then top-p,
    renormalised. logits (V,) → probabilities (V,) summing to 1."""
    logits = np.asarray(logits, dtype=np.float64)
    with np.errstate(over="ignore"):
        scaled = logits / params.temperature                                   # float64: no overflow in exp
        if not np.isfinite(scaled).all():          # a tiny temperature overflowed: shift first (same distribution)
            scaled = (logits - logits.max()) / params.temperature
    probabilities = np.exp(scaled - scaled.max())
    total = probabilities.sum()
    if not (np.isfinite(total) and total > 0):
        raise SamplingError(f"the logits give no distribution to sample from (non-finite values: "
                            f"{int((~np.isfinite(logits)).sum())} of {len(logits)})")
    probabilities /= total
    order = np.argsort(-probabilities, kind="stable")                         # most likely first
    keep = np.ones(len(order), dtype=bool)
    if params.top_k:
        keep[params.top_k:] = False
    if params.top_p < 1.0:
        cumulative = np.cumsum(probabilities[order])
        # keep a token if the tokens before it sum to less than p (so the first one is always kept)
        keep &= (cumulative - probabilities[order]) < params.top_p
    filtered = np.zeros_like(probabilities)
    filtered[order[keep]] = probabilities[order[keep]]
    return filtered / filtered.sum()


def next_token(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator | None) -> int:
    """One token id from one row of logits (V,)."""
    if params.greedy:
        return int(np.argmax(logits))
    probabilities = filtered_probabilities(logits, params)
    return int(rng.choice(len(probabilities), p=probabilities))


def request_rng(params: SamplingParams) -> np.random.Generator | None:
    """The request's own random stream (None for greedy: nothing to draw)."""
    if params.greedy:
        return None
    return np.random.default_rng(params.seed)
