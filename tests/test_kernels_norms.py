"""trnlab.kernels.norms: layer norm and RMS norm, forward and backward, against torch.

Tolerances: fp32 rtol 1e-4 / atol 1e-5 for activations and input gradients; the weight gradients sum
over every row (up to 300 here), so atol grows to 1e-4. bf16 inputs: math in fp32, one rounding at
the end (within 2 bf16 steps of torch's fp32 result on the same inputs).
"""
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import norms

ROWS, COLS = st.integers(1, 300), st.integers(1, 600)   # crosses 128 rows and a 512-feature PSUM chunk
FP32 = dict(rtol=1e-4, atol=1e-5)
SUMS = dict(rtol=1e-4, atol=1e-4)


def _rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@settings(max_examples=6, deadline=None)
@given(rows=ROWS, cols=COLS)
def test_layer_norm_matches_torch(rows, cols):
    x, gamma, beta = _rand(rows, rows, cols) * 3 + 1, _rand(cols, cols), _rand(2, cols)
    torch.testing.assert_close(norms.layer_norm(x, gamma, beta), F.layer_norm(x, (cols,), gamma, beta), **FP32)


def test_layer_norm_matches_nn_layernorm_module_and_bf16():
    layer = torch.nn.LayerNorm(96)
    x = _rand(3, 70, 96)
    with torch.no_grad():
        expected = layer(x)
    torch.testing.assert_close(norms.layer_norm(x, layer.weight.detach(), layer.bias.detach()), expected, **FP32)
    xb = x.bfloat16()
    out = norms.layer_norm(xb, layer.weight.detach().bfloat16(), layer.bias.detach().bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), F.layer_norm(xb.float(), (96,)), rtol=2 ** -7, atol=2 ** -7)


@settings(max_examples=6, deadline=None)
@given(rows=ROWS, cols=COLS)
def test_rms_norm_matches_torch(rows, cols):
    x, weight = _rand(rows + 1, rows, cols) * 2, _rand(cols + 1, cols)
    torch.testing.assert_close(norms.rms_norm(x, weight, eps=1e-6), F.rms_norm(x, (cols,), weight, eps=1e-6), **FP32)


@settings(max_examples=5, deadline=None)
# from C=8: with very few features the input gradient is a difference of nearly equal terms (for C <= 2 it is
# exactly 0 up to eps), and both sides return their own rounding noise times rstd
@given(rows=ROWS, cols=st.integers(8, 600))
def test_layer_norm_backward_matches_autograd(rows, cols):
    x = (_rand(rows, rows, cols) * 2 + 0.5).requires_grad_()
    gamma, beta = _rand(3, cols).requires_grad_(), _rand(4, cols).requires_grad_()
    grad_y = _rand(5, rows, cols)
    F.layer_norm(x, (cols,), gamma, beta).backward(grad_y)
    grad_x, grad_gamma, grad_beta = norms.layer_norm_backward(x.detach(), gamma.detach(), grad_y)
    torch.testing.assert_close(grad_x, x.grad, **FP32)
    torch.testing.assert_close(grad_gamma, gamma.grad, **SUMS)
    torch.testing.assert_close(grad_beta, beta.grad, **SUMS)


@settings(max_examples=5, deadline=None)
@given(rows=ROWS, cols=COLS)
def test_rms_norm_backward_matches_autograd(rows, cols):
    x = (_rand(rows + 2, rows, cols) * 2).requires_grad_()
    weight = _rand(6, cols).requires_grad_()
    grad_y = _rand(7, rows, cols)
    F.rms_norm(x, (cols,), weight, eps=1e-6).backward(grad_y)
    grad_x, grad_weight = norms.rms_norm_backward(x.detach(), weight.detach(), grad_y, eps=1e-6)
    torch.testing.assert_close(grad_x, x.grad, **FP32)
    torch.testing.assert_close(grad_weight, weight.grad, **SUMS)


def test_norm_kernels_run_in_timing_only_mode():
    x, w = nki.ShapeDtype((512, 256), "bfloat16"), nki.ShapeDtype((256,), "bfloat16")
    for kernel, args in ((norms.layer_norm, (x, w, w)), (norms.layer_norm_backward, (x, w, x)),
                         (norms.rms_norm, (x, w)), (norms.rms_norm_backward, (x, w, x))):
        run = nki.run(kernel, *args, timing_only=True)
        outputs = run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)
        assert all(o is None for o in outputs) and run.latency_us > 0


def test_layer_norm_backward_bf16_within_bf16_rounding():
    x = (_rand(8, 100, 64) * 2 + 0.5).bfloat16()
    gamma, beta, grad_y = _rand(9, 64).bfloat16(), _rand(10, 64).bfloat16(), _rand(11, 100, 64).bfloat16()
    leaves = [t.float().requires_grad_() for t in (x, gamma, beta)]
    F.layer_norm(leaves[0], (64,), leaves[1], leaves[2]).backward(grad_y.float())
    for grad, leaf in zip(norms.layer_norm_backward(x, gamma, grad_y), leaves):
        assert grad.dtype == torch.bfloat16
        torch.testing.assert_close(grad.float(), leaf.grad, rtol=2 ** -7, atol=2e-2)
