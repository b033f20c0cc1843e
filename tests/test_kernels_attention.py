"""trnlab.kernels.attention: causal multi-head attention (online softmax) and its backward vs torch.

The reference is the explicit computation of trnlab.model.gpt (scores, causal mask with -inf,
softmax, @ v). Tolerances: fp32 rtol 1e-4 / atol 1e-5 (online softmax rescales, so rounding differs
a little from one softmax over the whole row); gradients atol 1e-4. bf16 q, k, v: probabilities and
ds are rounded to bf16 before their matmuls, as on the device, so rtol/atol 3e-2 against fp32 math on
the same bf16 inputs.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import attention as att


def _reference(q, k, v):
    T = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)


def _qkv(seed, B, H, T, d, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, d, generator=generator).to(dtype) for _ in range(3))


SHAPES = dict(B=st.integers(1, 2), H=st.integers(1, 3), T=st.integers(1, 200), d=st.integers(1, 64))


@settings(max_examples=6, deadline=None)
@given(**SHAPES)
def test_causal_attention_matches_the_models_explicit_softmax(B, H, T, d):
    q, k, v = _qkv(B * 1000 + T, B, H, T, d)
    out, lse = att.causal_attention(q, k, v, return_lse=True)
    expected, expected_lse = _reference(q, k, v)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-5, atol=1e-5)


def test_attention_over_several_key_tiles_matches_sdpa():
    q, k, v = _qkv(1, 1, 2, 300, 32)        # three query tiles and three key tiles: online softmax at work
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(att.causal_attention(q, k, v), expected, rtol=1e-4, atol=1e-5)


def test_attention_bf16_inputs():
    q, k, v = _qkv(2, 2, 4, 32, 32, dtype=torch.bfloat16)
    out = att.causal_attention(q, k, v)
    assert out.dtype == torch.bfloat16
    expected, _ = _reference(q.float(), k.float(), v.float())
    torch.testing.assert_close(out.float(), expected, rtol=3e-2, atol=3e-2)


@settings(max_examples=5, deadline=None)
@given(**SHAPES)
def test_causal_attention_backward_matches_autograd(B, H, T, d):
    q, k, v = _qkv(B * 7 + T, B, H, T, d)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    grad_out = torch.randn(B, H, T, d, generator=torch.Generator().manual_seed(T))
    _reference(*leaves)[0].backward(grad_out)
    out, lse = att.causal_attention(q, k, v, return_lse=True)
    grads = att.causal_attention_backward(q, k, v, out, grad_out, lse)
    for grad, leaf in zip(grads, leaves):
        torch.testing.assert_close(grad, leaf.grad, rtol=1e-4, atol=1e-4)


def test_attention_backward_bf16():
    q, k, v = _qkv(3, 1, 2, 150, 32, dtype=torch.bfloat16)
    grad_out = torch.randn(1, 2, 150, 32).bfloat16()
    leaves = [x.float().requires_grad_() for x in (q, k, v)]
    _reference(*leaves)[0].backward(grad_out.float())
    out, lse = att.causal_attention(q, k, v, return_lse=True)
    for grad, leaf in zip(att.causal_attention_backward(q, k, v, out, grad_out, lse), leaves):
        assert grad.dtype == torch.bfloat16
        torch.testing.assert_close(grad.float(), leaf.grad, rtol=3e-2, atol=3e-2)


def test_attention_rejects_heads_wider_than_the_partitions():
    q = torch.zeros(1, 1, 4, 129)
    with pytest.raises(ValueError, match="head size d=129 exceeds 128 partitions"):
        att.causal_attention(q, q, q)


def test_attention_kernels_run_in_timing_only_mode():
    x = nki.ShapeDtype((4, 4, 128, 32), "bfloat16")
    lse = nki.ShapeDtype((4, 4, 128), "float32")
    run = nki.run(att.causal_attention, x, x, x, timing_only=True)
    assert run.outputs is None and run.latency_us > 0
    run = nki.run(att.causal_attention_backward, x, x, x, x, x, lse, timing_only=True)
    assert run.outputs == (None, None, None) and run.latency_us > 0


def _model_attention(qkv, n_head):
    """The attention core of trnlab.model.gpt.CausalSelfAttention, from its qkv projection to y."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (part.view(B, T, n_head, C // n_head).transpose(1, 2) for part in qkv.split(C, dim=2))
    return _reference(q, k, v)[0].transpose(1, 2).contiguous().view(B, T, C)


@settings(max_examples=4, deadline=None)
@given(B=st.integers(1, 2), T=st.integers(1, 150), n_head=st.sampled_from([1, 2, 4]), d=st.integers(1, 32))
def test_attention_in_the_models_qkv_layout_forward_and_backward(B, T, n_head, d):
    generator = torch.Generator().manual_seed(B * 100 + T)
    qkv = torch.randn(B, T, 3 * n_head * d, generator=generator)
    y, lse = att.causal_attention_qkv(qkv, n_head, return_lse=True)
    torch.testing.assert_close(y, _model_attention(qkv, n_head), rtol=1e-4, atol=1e-5)
    leaf = qkv.clone().requires_grad_()
    grad_y = torch.randn(B, T, n_head * d, generator=generator)
    _model_attention(leaf, n_head).backward(grad_y)
    torch.testing.assert_close(att.causal_attention_qkv_backward(qkv, y, grad_y, lse, n_head), leaf.grad,
                               rtol=1e-4, atol=1e-4)


def test_attention_qkv_matches_the_model_module():
    from trnlab.model.gpt import CausalSelfAttention, GPTConfig
    torch.manual_seed(0)
    module = CausalSelfAttention(GPTConfig(n_embd=64, n_head=4, block_size=32))
    x = torch.randn(2, 32, 64)
    with torch.no_grad():
        expected = module(x)
        qkv = module.qkv(x)
        y = att.causal_attention_qkv(qkv, 4)
        torch.testing.assert_close(module.proj(y), expected, rtol=1e-4, atol=1e-5)


def test_qkv_width_must_split_into_heads():
    with pytest.raises(ValueError, match="qkv has 10 columns, not 3 \\* n_head \\* d for n_head=4"):
        att.causal_attention_qkv(torch.zeros(1, 4, 10), 4)
