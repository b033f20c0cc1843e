"""The KV cache and the shape buckets of compiled prefill and decode programs.

Without a cache every new token re-runs the model on the whole sequence (trnlab.model.generate).
With one, the keys and values each layer computed for earlier positions are kept, and a decode
step runs the model on the new token only: its query attends to the cached keys and values.

    KVCache.keys / .values   (slots, n_layer, block_size, C) fp32, heads side by side in C
    KVCache.lengths          (slots,) positions filled per slot

A slot is one sequence's row, as in a static-batch Neuron cache: a request takes a free slot when it
joins the running batch and gives it back when it leaves. The cache's size is

    2 (K and V) × n_layer × positions × C × bytes per element   per sequence

which is what limits the batch on a real chip long before the weights do for large models.

Buckets: Neuron compiles one graph per input shape, so serving frameworks compile a few shapes
("buckets", powers of two, NxD Inference: from 128 up to the context) and pad each input up to the
next one. Here the context is 32, so the buckets are 8, 16, 32 positions and 1, 2, 4, ... sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnlab.model.gpt import GPTConfig


def kv_cache_bytes(config: GPTConfig, positions: int, batch: int = 1, bytes_per_element: int = 4) -> int:
    """Bytes of K and V for `batch` sequences of `positions` tokens: 2 × layers × positions × C × bytes × batch."""
    return 2 * config.n_layer * positions * config.n_embd * bytes_per_element * batch


def buckets(largest: int, smallest: int = 1) -> list[int]:
    """Powers of two from `smallest` up to `largest` (which is always included, even if not a power of two)."""
    if smallest < 1 or largest < smallest:
        raise ValueError(f"buckets need 1 <= smallest <= largest, got smallest={smallest}, largest={largest}")
    sizes, size = [], 1
    while size < largest:
        if size >= smallest:
            sizes.append(size)
        size *= 2
    return sizes + [largest]


def bucket_for(n: int, sizes: list[int]) -> int:
    """The smallest bucket that holds n."""
    for size in sizes:
        if n <= size:
            return size
    raise ValueError(f"no bucket holds {n}: the largest is {sizes[-1]}")


@dataclass
class KVCache:
    """Keys and values of every layer for a fixed number of sequence slots."""

    keys: np.ndarray      # (slots, n_layer, block_size, C)
    values: np.ndarray    # (slots, n_layer, block_size, C)
    lengths: np.ndarray   # (slots,) int: positions written per slot

    @classmethod
    def empty(cls, config: GPTConfig, slots: int) -> "KVCache":
        shape = (slots, config.n_layer, config.block_size, config.n_embd)
        return cls(np.zeros(shape, np.float32), np.zeros(shape, np.float32), np.zeros(slots, np.int64))

    @property
    def slots(self) -> int:
        return self.keys.shape[0]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def write(self, slot: int, layer: int, position: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store k, v (n, C) of positions position..position+n-1 of one slot's layer."""
        n = k.shape[0]
        if position + n > self.keys.shape[2]:
            raise ValueError(f"KV cache overflow: positions {position}..{position + n - 1} in a cache of "
                             f"{self.keys.shape[2]} positions")
        self.keys[slot, layer, position:position + n] = k
        self.values[slot, layer, position:position + n] = v

    def reset(self, slot: int) -> None:
        self.lengths[slot] = 0

    def attention_bias(self, slots: list[int], length: int, extra: int = 0) -> np.ndarray:
        """[len(slots), length] fp32: 0 where a slot has a position (its length + `extra` new ones), -1e30 after."""
        filled = self.lengths[slots] + extra                                  # (B,)
        positions = np.arange(length)[None, :]                                # (1, L)
        return np.where(positions < filled[:, None], 0.0, -1.0e30).astype(np.float32)
