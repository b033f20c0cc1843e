"""Where the model runs during serving: the `Backend` seam, and the PyTorch (`cpu`) backend.

A backend offers the two programs a Neuron serving stack compiles for a decoder:

    prefill(tokens, slot, cache)   one prompt → logits of its next token; writes its keys/values
    decode(tokens, slots, cache)   one new token per running sequence → their next-token logits;
                                   appends one key/value row per sequence

Both pad their input up to a shape bucket (kv_cache.buckets), as a compiled graph has fixed shapes,
and report the bucket, the simulated device time and the kernels it was made of (`StepResult`).
This module does the padding and the cache bookkeeping once; a backend only supplies the two
padded forwards `_prefill_forward` and `_decode_forward`. `CpuBackend` writes them in PyTorch with
the model's own modules; `trnlab.serve.steps.CompiledBackend` replays a compiled program per bucket
on the simulated NeuronCore. `make_backend("cpu" | "trn1" | "trn2" | "trn3", model)` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from trnlab.compiler.ops import decode_attention_reference
from trnlab.model.gpt import GPT
from trnlab.serve.kv_cache import KVCache, bucket_for, buckets

SMALLEST_LENGTH_BUCKET = 8      # positions; NxD starts at 128 for contexts in the thousands, ours is 32
DEFAULT_MAX_BATCH = 64


@dataclass
class StepResult:
    """What one prefill or decode step produced."""

    kind: str                   # "prefill" | "decode"
    logits: np.ndarray          # (B, vocab): next-token logits of each real (unpadded) sequence
    bucket: tuple[int, int]     # (batch, positions) of the compiled shape it ran in
    simulated_ns: float         # device time of the step on the simulated chip (0.0 on the cpu backend)
    kernels: list[tuple[str, float]] = field(default_factory=list)   # (kernel, simulated ns), in order


class Backend(ABC):
    """Padding to buckets and the KV-cache bookkeeping shared by every backend."""

    name = "abstract"
    device = "none"             # what the step times are of: "cpu" (none simulated) or a Trainium preset

    def __init__(self, model: GPT, max_batch: int = DEFAULT_MAX_BATCH):
        self.model = model.eval()
        self.config = model.config
        self.length_buckets = buckets(self.config.block_size, min(SMALLEST_LENGTH_BUCKET, self.config.block_size))
        self.batch_buckets = buckets(max_batch)
        self.pad_id = 0

    @property
    def max_batch(self) -> int:
        return self.batch_buckets[-1]

    def prefill(self, tokens: list[int], slot: int, cache: KVCache) -> StepResult:
        """Run the prompt `tokens`, fill positions 0..n-1 of `slot` and return its next-token logits (1, V)."""
        n = len(tokens)
        if not 0 < n <= self.config.block_size:
            raise ValueError(f"prefill of {n} tokens: the context holds 1..{self.config.block_size}")
        T = bucket_for(n, self.length_buckets)
        ids = np.full(T, self.pad_id, dtype=np.int64)
        ids[:n] = tokens                          # padding after the prompt: causal attention never sees it
        logits, keys, values, ns, kernels = self._prefill_forward(ids)       # (T, V), (n_layer, T, C) × 2
        for layer in range(self.config.n_layer):
            cache.write(slot, layer, 0, keys[layer, :n], values[layer, :n])
        cache.lengths[slot] = n
        return StepResult("prefill", logits[n - 1:n], (1, T), ns, kernels)

    def decode(self, tokens: list[int], slots: list[int], cache: KVCache) -> StepResult:
        """One new token per slot (at position cache.lengths[slot]) → next-token logits (B, V)."""
        B = len(tokens)
        if B != len(slots) or B == 0:
            raise ValueError(f"decode needs one token per slot and at least one: {B} tokens, {len(slots)} slots")
        lengths = cache.lengths[slots]                                        # (B,) positions before this token
        if lengths.min() < 1 or lengths.max() >= self.config.block_size:
            raise ValueError(f"decode at positions {lengths.tolist()}: each must be in 1..{self.config.block_size - 1} "
                             f"(after a prefill, inside the context of {self.config.block_size})")
        Bb = bucket_for(B, self.batch_buckets)
        L = bucket_for(int(lengths.max()), self.length_buckets)
        C, n_layer = self.config.n_embd, self.config.n_layer
        ids = np.full(Bb, self.pad_id, dtype=np.int64)
        ids[:B] = tokens
        positions = np.zeros(Bb, dtype=np.int64)
        positions[:B] = lengths
        keys = np.zeros((Bb, n_layer, L, C), np.float32)
        values = np.zeros((Bb, n_layer, L, C), np.float32)
        keys[:B], values[:B] = cache.keys[slots, :, :L], cache.values[slots, :, :L]
        bias = np.full((Bb, L), -1.0e30, np.float32)                           # padding rows see only themselves
        bias[:B] = cache.attention_bias(slots, L)
        logits, new_keys, new_values, ns, kernels = self._decode_forward(ids, positions, keys, values, bias)
        for i, slot in enumerate(slots):                                      # append the new rows
            for layer in range(n_layer):
                cache.write(slot, layer, int(lengths[i]), new_keys[i, layer][None], new_values[i, layer][None])
            cache.lengths[slot] += 1
        return StepResult("decode", logits[:B], (Bb, L), ns, kernels)

    # -- what a backend supplies (CpuBackend: PyTorch; CompiledBackend: the simulated Trainium) ---------
    @abstractmethod
    def _prefill_forward(self, ids: np.ndarray):
        """ids (T,) → logits (T, V), keys (n_layer, T, C), values (n_layer, T, C), simulated ns, kernels."""

    @abstractmethod
    def _decode_forward(self, ids, positions, keys, values, bias):
        """ids, positions (B,); keys, values (B, n_layer, L, C) of earlier positions; bias (B, L) →
        logits (B, V), new keys and values (B, n_layer, C), simulated ns, kernels."""


class CpuBackend(Backend):
    """The model's own PyTorch modules, with the cache: no simulated time."""

    name = "cpu"
    device = "cpu"

    @torch.no_grad()
    def _prefill_forward(self, ids: np.ndarray):
        # the model's own forward; hooks on each qkv projection keep the keys and values it computes
        C = self.config.n_embd
        captured = []
        hooks = [block.attn.qkv.register_forward_hook(lambda module, args, out: captured.append(out[0]))
                 for block in self.model.blocks]
        try:
            logits, _ = self.model(torch.from_numpy(ids)[None])                        # (1, T, V)
        finally:
            for hook in hooks:
                hook.remove()
        qkv = torch.stack(captured)                                                    # (n_layer, T, 3C)
        return logits[0].numpy(), qkv[:, :, C:2 * C].numpy(), qkv[:, :, 2 * C:].numpy(), 0.0, []

    @torch.no_grad()
    def _decode_forward(self, ids, positions, keys, values, bias):
        m = self.model
        x = m.wte(torch.from_numpy(ids)) + m.wpe(torch.from_numpy(positions))          # (B, C)
        keys, values, bias = torch.from_numpy(keys), torch.from_numpy(values), torch.from_numpy(bias)
        B, C = x.shape
        new_keys, new_values = [], []
        for layer, block in enumerate(m.blocks):
            attn = block.attn
            qkv = attn.qkv(block.ln_1(x))                                              # (B, 3C)
            new_keys.append(qkv[:, C:2 * C]), new_values.append(qkv[:, 2 * C:])
            y = decode_attention_reference(qkv, keys[:, layer], values[:, layer], bias, attn.n_head)   # (B, C)
            x = x + attn.proj(y)
            x = x + block.mlp(block.ln_2(x))
        logits = m.lm_head(m.ln_f(x))                                                  # (B, V)
        return (logits.numpy(), torch.stack(new_keys, 1).numpy(), torch.stack(new_values, 1).numpy(), 0.0, [])


DEVICES = ("cpu", "trn1", "trn2", "trn3")


def make_backend(device: str, model: GPT, max_batch: int = DEFAULT_MAX_BATCH, cache_dir="default") -> Backend:
    """"cpu" → CpuBackend; "trn1" | "trn2" | "trn3" → CompiledBackend on that simulated NeuronCore, its
    compiled buckets kept as artifacts in `cache_dir` ("default": `compiled.default_cache_dir()`, None: none)."""
    if device == "cpu":
        return CpuBackend(model, max_batch)
    if device in DEVICES:
        from trnlab.serve.steps import CompiledBackend, default_cache_dir
        cache_dir = default_cache_dir() if cache_dir == "default" else cache_dir
        return CompiledBackend(model, target=device, max_batch=max_batch, cache_dir=cache_dir)
    raise ValueError(f"unknown device {device!r}: choose one of {', '.join(DEVICES)}")
