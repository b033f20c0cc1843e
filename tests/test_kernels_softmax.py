"""trnlab.kernels.softmax: row-wise stable softmax and its backward against torch.softmax / autograd.

Tolerances: fp32 atol 1e-6 (probabilities are <= 1; only exp/sum rounding differs). bf16 input:
the kernel computes in fp32 and rounds once, so it is within one bf16 step (2**-8 relative) of
torch's fp32 softmax of the same bf16 values.
"""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import softmax as sm


def _rand(seed, *shape, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 200))
def test_softmax_matches_torch_on_any_shape_with_a_masked_last_tile(rows, cols):
    x = _rand(rows * 7 + cols, rows, cols, scale=4.0)
    torch.testing.assert_close(sm.softmax(x), torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)


def test_softmax_is_stable_for_huge_logits():
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]])
    out = sm.softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


def test_softmax_bf16_rounds_once_from_fp32():
    x = _rand(1, 130, 64, scale=3.0).bfloat16()
    out = sm.softmax(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), dim=-1), rtol=2 ** -8, atol=1e-3)


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 150))
def test_softmax_backward_matches_autograd(rows, cols):
    x = _rand(rows + 3 * cols, rows, cols, scale=2.0).requires_grad_()
    y = torch.softmax(x, dim=-1)
    grad_y = _rand(5, rows, cols)
    y.backward(grad_y)
    torch.testing.assert_close(sm.softmax_backward(y.detach(), grad_y), x.grad, rtol=1e-4, atol=1e-6)


def test_softmax_kernels_run_in_timing_only_mode():
    shape = nki.ShapeDtype((4 * 4 * 128, 128), "float32")
    for kernel, args in ((sm.softmax, (shape,)), (sm.softmax_backward, (shape, shape))):
        run = nki.run(kernel, *args, timing_only=True)
        assert run.outputs is None and run.latency_us > 0
