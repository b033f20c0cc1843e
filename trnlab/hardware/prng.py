"""The engines' pseudo random number generators: XORWOW, one state per compute lane (NumPy).

AWS's pages say what the hardware keeps and how big it is, not the exact bits:
- "Uses XORWOW PRNG algorithm" (nki.isa.rand2);
- the state "is cached inside the engine as a persistent state during the rest of NEFF execution"
  (nki.isa.set_rng_seed, rand_set_state);
- "Each partition in the source tensor seeds the PRNG states for the corresponding compute lane";
  "src_seeds element count for XORWOW must be 6 elements (GpSimd) or 24 elements (Vector)"
  (nki.isa.rand_set_state, rand_get_state);
- rng "generates 32 random bits per element ... truncates each 32-bit random value to the
  specified data type, taking the least significant bits" (nki.isa.rng).
(awsdocs-neuron.readthedocs-hosted.com, NKI API reference, en/v2.33.0 ... nki.isa.*.html)

trnlab's generator, deterministic and reproducible in full mode (what is ASSUMED is marked):
- a lane's 6 words are one Marsaglia XORWOW generator (x, y, z, w, v, d: five xorshift words and
  the Weyl counter d), the standard recurrence; a Vector lane's 24 words are 4 such generators
  (ASSUMED), element j of a lane's row drawn from generator j mod 4 (ASSUMED);
- a 32-bit seed (nki.isa.set_rng_seed, nl.random_seed) fills every lane's words with SplitMix32
  outputs of (seed, lane, word) (ASSUMED: AWS does not say how the engine expands a seed); an
  engine never seeded starts as if seeded with 0 (ASSUMED);
- rand2's uniform value is min + (bits >> 8) * 2**-24 * (max - min) (ASSUMED: the top 24 bits
  as a float32 fraction in [0, 1)).
"""
from __future__ import annotations

import numpy as np

WORDS = {"pool": 6, "dve": 24}        # uint32 state words per lane: GpSimd, Vector (rand_set_state page)
GENERATOR_WORDS = 6                   # x, y, z, w, v, d: one XORWOW generator
WEYL = np.uint32(362437)              # XORWOW's Weyl increment (Marsaglia 2003)
_M32 = 0xFFFFFFFF


def _splitmix32(values: np.ndarray) -> np.ndarray:
    """A 32-bit mix of uint32 values (SplitMix-style finaliser): well spread, never all zero."""
    z = values.astype(np.uint64)
    z = (z + 0x9E3779B9) & _M32
    z = ((z ^ (z >> 16)) * 0x85EBCA6B) & _M32
    z = ((z ^ (z >> 13)) * 0xC2B2AE35) & _M32
    return (z ^ (z >> 16)).astype(np.uint32)


def seeded_state(seed: int, lanes: int, engine: str) -> np.ndarray:
    """[lanes, WORDS[engine]] uint32: the state a 32-bit `seed` gives every lane (ASSUMED expansion)."""
    words = WORDS[engine]
    lane = np.arange(lanes, dtype=np.uint64)[:, None]
    word = np.arange(words, dtype=np.uint64)[None, :]
    key = ((int(seed) & _M32) ^ ((lane * 0x01000193 + word * 0x9E3779B1) & _M32)) & _M32
    state = _splitmix32(_splitmix32(key.astype(np.uint32)) ^ np.uint32(int(seed) & _M32))
    # the xorshift words of a generator must not all be zero: force a bit in x
    state = state.reshape(lanes, words // GENERATOR_WORDS, GENERATOR_WORDS)
    state[:, :, 0] |= np.uint32(1)
    return state.reshape(lanes, words)


def draw(state: np.ndarray, count: int) -> np.ndarray:
    """[lanes, count] uint32 random words from `state` ([lanes, 6 k] uint32, advanced in place):
    element j of a lane comes from the lane's generator j mod k, one XORWOW step each."""
    lanes, words = state.shape
    k = words // GENERATOR_WORDS
    g = state.reshape(lanes, k, GENERATOR_WORDS)
    x, y, z, w, v, d = (g[:, :, i].copy() for i in range(GENERATOR_WORDS))
    steps = -(-count // k)
    out = np.empty((lanes, steps, k), np.uint32)
    with np.errstate(over="ignore"):
        for s in range(steps):
            t = x ^ (x >> np.uint32(2))
            x, y, z, w = y, z, w, v
            v = (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))
            d = d + WEYL
            out[:, s, :] = v + d
    for i, word in enumerate((x, y, z, w, v, d)):
        g[:, :, i] = word
    return out.reshape(lanes, steps * k)[:, :count]


def uniform(bits: np.ndarray, low, high) -> np.ndarray:
    """float32 values in [low, high] from uint32 words: the top 24 bits as a fraction (ASSUMED)."""
    fraction = (bits >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    low = np.asarray(low, np.float32)
    high = np.asarray(high, np.float32)
    return (low + fraction * (high - low)).astype(np.float32)


def truncate(bits: np.ndarray, dtype) -> np.ndarray:
    """The least significant bits of uint32 words as an integer dtype of 8, 16 or 32 bits (nki.isa.rng)."""
    dtype = np.dtype(dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return bits.astype(np.uint32).astype(unsigned).view(dtype)    # (a narrowing cast keeps the low bits)
