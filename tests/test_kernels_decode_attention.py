"""decode_attention: one new query per sequence against its KV cache and its own key equals softmax
attention over the sequence's positions, for any mix of cache lengths in the bucket (the mask is data)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels.decode_attention import MASKED, decode_attention


def reference(qkv, k_cache, v_cache, lengths, n_head):
    B, L, C = k_cache.shape
    d = C // n_head
    y = np.zeros((B, C))
    for b, n in enumerate(lengths):
        for h in range(n_head):
            cols = slice(h * d, (h + 1) * d)
            keys = np.vstack([k_cache[b, :n, cols], qkv[b, C:2 * C][cols]])          # the cache, then itself
            values = np.vstack([v_cache[b, :n, cols], qkv[b, 2 * C:][cols]])
            scores = keys @ qkv[b, :C][cols] / np.sqrt(d)
            p = np.exp(scores - scores.max())
            y[b, cols] = (p / p.sum()) @ values
    return y


@settings(max_examples=10, deadline=None)
@given(B=st.integers(1, 3), L=st.sampled_from([8, 32, 160]), n_head=st.sampled_from([1, 4]), data=st.data())
def test_decode_attention_matches_softmax_attention_over_the_cached_positions(B, L, n_head, data):
    C = 32
    lengths = data.draw(st.lists(st.integers(0, L), min_size=B, max_size=B))
    rng = np.random.default_rng(L * 10 + B)
    qkv = rng.standard_normal((B, 3 * C)).astype(np.float32)
    k_cache, v_cache = (rng.standard_normal((B, L, C)).astype(np.float32) for _ in range(2))
    bias = np.where(np.arange(L)[None] < np.array(lengths)[:, None], 0.0, MASKED).astype(np.float32)
    y = decode_attention(qkv, k_cache, v_cache, bias, n_head)
    np.testing.assert_allclose(y, reference(qkv, k_cache, v_cache, lengths, n_head), rtol=2e-5, atol=2e-5)


def test_decode_attention_is_memory_bound():
    """Decode reads the whole cache for a handful of FLOPs: far below the ridge point of the roofline."""
    B, L, C = 8, 128, 64
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((B, 3 * C)).astype(np.float32),
            *(rng.standard_normal((B, L, C)).astype(np.float32) for _ in range(2)), np.zeros((B, L), np.float32))
    profile = nki.run(decode_attention, *args, 4).profile()
    useful_flops = 2 * 2 * B * L * C                         # q . k and p @ v over every cached position
    assert profile.hbm_bytes >= 2 * B * L * C * 4            # the whole cache is read
    assert useful_flops / profile.hbm_bytes < 1              # FLOP per HBM byte; a Trn2 core's ridge is ~100x higher
    assert profile.mfu < 0.05                                # the Tensor engine idles


def test_decode_attention_names_the_limit_it_breaks():
    qkv = np.zeros((1, 96), np.float32)
    with pytest.raises(ValueError, match="cache length L=512 plus the new token exceeds 512"):
        decode_attention(qkv, np.zeros((1, 512, 32), np.float32), np.zeros((1, 512, 32), np.float32),
                         np.zeros((1, 512), np.float32), 1)
