"""trnlab.kernels.activations: GELU (erf and tanh forms), forward and backward, against torch.

Tolerances: fp32 rtol 1e-5 / atol 1e-5 (the engines evaluate erf/tanh/exp in fp32 like torch);
bf16: computed in fp32 and rounded once, so within one bf16 step (2**-8 relative) of torch's fp32
result on the same bf16 inputs. Backward atol 1e-4: where tanh saturates, 1 - tanh^2 cancels in fp32
and torch and the kernel round that tiny difference differently (gradients here are of size ~10).
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import activations


def _rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 2100), approximate=st.sampled_from(["none", "tanh"]))
def test_gelu_matches_torch_both_forms_any_shape(rows, cols, approximate):
    x = _rand(rows + cols, rows, cols)
    torch.testing.assert_close(activations.gelu(x, approximate), F.gelu(x, approximate=approximate),
                               rtol=1e-5, atol=1e-5)


def test_gelu_default_is_the_erf_form_of_nn_gelu_in_the_model():
    x = _rand(1, 40, 64)
    torch.testing.assert_close(activations.gelu(x), torch.nn.GELU()(x), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(activations.gelu(x, "tanh"), torch.nn.GELU()(x), rtol=0, atol=1e-6)


def test_gelu_bf16_rounds_once():
    x = _rand(2, 130, 96).bfloat16()
    out = activations.gelu(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), F.gelu(x.float()), rtol=2 ** -8, atol=1e-3)


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300), approximate=st.sampled_from(["none", "tanh"]))
def test_gelu_backward_matches_autograd(rows, cols, approximate):
    x = _rand(rows * 3 + cols, rows, cols).requires_grad_()
    grad_y = _rand(9, rows, cols)
    F.gelu(x, approximate=approximate).backward(grad_y)
    torch.testing.assert_close(activations.gelu_backward(x.detach(), grad_y, approximate), x.grad,
                               rtol=1e-5, atol=1e-4)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        activations.gelu(torch.ones(2, 2), "sigmoid")


def test_gelu_kernels_run_in_timing_only_mode():
    x = nki.ShapeDtype((512, 1024), "bfloat16")
    for kernel, args in ((activations.gelu, (x,)), (activations.gelu_backward, (x, x))):
        run = nki.run(kernel, *args, timing_only=True)
        assert run.outputs is None and run.latency_us > 0
