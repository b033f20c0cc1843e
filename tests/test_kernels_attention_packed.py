"""trnlab.kernels.attention_packed: several short sequences of one head per tile, block-diagonal causal mask.

The packed kernel must give exactly the per-(batch, head) kernel's values (the masked entries are 0
after the exp, and each sequence's sums see its own terms in the same order), in far fewer
instructions, and the same answer as PyTorch's causal attention.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels.attention import causal_attention_qkv
from trnlab.kernels.attention_packed import block_causal_mask, causal_attention_qkv_packed, packable


def _qkv(seed, B, T, H, d, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal((B, T, 3 * H * d)).astype(dtype)


@settings(max_examples=5, deadline=None)
@given(B=st.integers(2, 9), T=st.sampled_from([32, 64]), H=st.integers(1, 3), d=st.sampled_from([8, 16, 32]))
def test_packed_attention_gives_the_per_head_kernels_values_exactly(B, T, H, d):
    qkv = _qkv(B * 100 + T + H, B, T, H, d)          # B not a multiple of 128 // T: a partial last tile too
    packed = np.asarray(causal_attention_qkv_packed(qkv, H))
    per_head = np.asarray(causal_attention_qkv(qkv, H))
    assert np.array_equal(packed, per_head)


def test_packed_attention_matches_torch_sdpa():
    B, T, H, d = 6, 32, 2, 16
    qkv = torch.from_numpy(_qkv(1, B, T, H, d))
    q, k, v = (qkv[..., i * H * d:(i + 1) * H * d].reshape(B, T, H, d).transpose(1, 2) for i in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = expected.transpose(1, 2).reshape(B, T, H * d)
    torch.testing.assert_close(torch.as_tensor(np.asarray(causal_attention_qkv_packed(qkv.numpy(), H))), expected,
                               rtol=1e-4, atol=1e-5)


def test_packing_four_sequences_per_tile_cuts_the_instructions_fourfold():
    qkv = nki.ShapeDtype((64, 32, 3 * 64), np.float32)   # the tiny GPT's attention at batch 64
    per_head = nki.trace(causal_attention_qkv, qkv, 4, target="trn2")
    packed = nki.trace(causal_attention_qkv_packed, qkv, 4, target="trn2")
    assert len(packed.instructions) * 4 < len(per_head.instructions)


def _mask_values(n, T):
    @nki.jit
    def kernel(x):
        out = nki.language.ndarray((n, n), dtype=nki.language.float32, buffer=nki.language.shared_hbm)
        nki.language.store(out, value=block_causal_mask(n, T))
        return out
    return np.asarray(kernel(np.zeros((1,), np.float32)))


@pytest.mark.parametrize("n, T", [(128, 32), (96, 32), (128, 64)])
def test_block_causal_mask_lets_a_query_see_only_earlier_keys_of_its_own_sequence(n, T):
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    visible = (j <= i) & (j // T == i // T)
    assert np.array_equal(_mask_values(n, T), np.where(visible, 0.0, -1.0e30).astype(np.float32))


def test_packed_attention_refuses_sequences_it_cannot_pack():
    assert not packable(1, 32) and not packable(8, 48) and not packable(8, 16) and packable(2, 64)
    with pytest.raises(ValueError, match="T=48 must be one of"):
        causal_attention_qkv_packed(_qkv(0, 2, 48, 1, 8), 1)
