"""trnlab.kernels.matmul: tiled matmul for any shape, fused linear, and their backward, against PyTorch.

Tolerances: fp32 inputs accumulate in fp32 in PSUM like torch, so only summation order differs
(rtol 1e-4, atol 1e-4). bf16 inputs: both sides see the same bf16 inputs and accumulate in fp32;
the kernel rounds its output to bf16 once (rtol 2e-2, atol 2e-2 relative to values of size ~sqrt(K)).
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import matmul as mm

SIZES = st.integers(1, 300)       # crosses the 128 (partition / stationary) and 512 (moving) tile edges
FP32 = dict(rtol=1e-4, atol=1e-4)
BF16 = dict(rtol=2e-2, atol=2e-2)


def _rand(seed, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@settings(max_examples=6, deadline=None)
@given(M=SIZES, K=SIZES, N=st.integers(1, 700))
def test_matmul_any_shape_matches_torch_fp32(M, K, N):
    a, b = _rand(1, M, K), _rand(2, K, N)
    torch.testing.assert_close(mm.matmul(a, b), a @ b, **FP32)


@settings(max_examples=4, deadline=None)
@given(M=SIZES, K=SIZES, N=SIZES)
def test_matmul_lhsT_layout_needs_no_transpose_and_matches_torch(M, K, N):
    lhsT, rhs = _rand(3, K, M), _rand(4, K, N)
    torch.testing.assert_close(mm.matmul_lhsT(lhsT, rhs), lhsT.T @ rhs, **FP32)


def test_matmul_bf16_inputs_accumulate_in_fp32_and_round_once():
    a, b = _rand(5, 200, 300, dtype=torch.bfloat16), _rand(6, 300, 130, dtype=torch.bfloat16)
    out = mm.matmul(a, b)
    assert out.dtype == torch.bfloat16
    expected = (a.float() @ b.float()).bfloat16()
    torch.testing.assert_close(out.float(), expected.float(), **BF16)


@pytest.mark.parametrize("activation,torch_fn", [
    (None, lambda z: z), ("relu", torch.relu), ("gelu", torch.nn.functional.gelu),
    ("gelu_tanh", lambda z: torch.nn.functional.gelu(z, approximate="tanh")), ("silu", torch.nn.functional.silu),
])
def test_linear_bias_and_activation_fused_match_torch(activation, torch_fn):
    x, weight, bias = _rand(7, 150, 96), _rand(8, 96, 520), _rand(9, 520)
    torch.testing.assert_close(mm.linear(x, weight, bias, activation), torch_fn(x @ weight + bias), **FP32)


def test_linear_takes_nn_linear_weight_transposed():
    layer = torch.nn.Linear(64, 200)
    x = _rand(10, 33, 64)
    with torch.no_grad():
        expected = layer(x)
    weight_in_out = layer.weight.detach().T.contiguous()
    torch.testing.assert_close(mm.linear(x, weight_in_out, layer.bias.detach()), expected, **FP32)


def test_linear_without_bias_reads_activation_straight_from_psum():
    x, weight = _rand(11, 20, 30), _rand(12, 30, 40)
    torch.testing.assert_close(mm.linear(x, weight, None, "relu"), torch.relu(x @ weight), **FP32)


@settings(max_examples=5, deadline=None)
@given(M=SIZES, K=SIZES, N=SIZES)
def test_matmul_backward_is_two_matmuls_matching_autograd(M, K, N):
    a, b = _rand(13, M, K).requires_grad_(), _rand(14, K, N).requires_grad_()
    grad_out = _rand(15, M, N)
    (a @ b).backward(grad_out)
    grad_a, grad_b = mm.matmul_backward(a.detach(), b.detach(), grad_out)
    torch.testing.assert_close(grad_a, a.grad, **FP32)
    torch.testing.assert_close(grad_b, b.grad, **FP32)


@settings(max_examples=4, deadline=None)
@given(M=SIZES, K=SIZES, N=SIZES)
def test_linear_backward_matches_autograd(M, K, N):
    x = _rand(16, M, K).requires_grad_()
    weight = _rand(17, K, N).requires_grad_()
    bias = _rand(18, N).requires_grad_()
    grad_out = _rand(19, M, N)
    (x @ weight + bias).backward(grad_out)
    grad_x, grad_weight, grad_bias = mm.linear_backward(x.detach(), weight.detach(), grad_out)
    torch.testing.assert_close(grad_x, x.grad, **FP32)
    torch.testing.assert_close(grad_weight, weight.grad, **FP32)
    torch.testing.assert_close(grad_bias, bias.grad, **FP32)


def test_linear_runs_in_timing_only_mode_for_large_shapes():
    shapes = [nki.ShapeDtype((512, 256), "bfloat16"), nki.ShapeDtype((256, 1024), "bfloat16"),
              nki.ShapeDtype((1024,), "bfloat16")]
    run = nki.run(mm.linear, *shapes, "gelu", timing_only=True)
    assert run.outputs is None and run.latency_us > 0
    assert any(r.opcode == "nc_matmul" for r in run.timeline)


def test_unknown_activation_is_named_in_the_error():
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        mm.linear(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), None, "swish")


def test_matmul_reloads_b_per_stripe_when_it_does_not_fit(monkeypatch):
    monkeypatch.setattr(mm, "RESIDENT_BYTES_PER_PARTITION", 0)      # force the reload path
    a, b = _rand(20, 300, 140), _rand(21, 140, 530)
    torch.testing.assert_close(mm.matmul(a, b), a @ b, **FP32)
    grad_a, _ = mm.matmul_backward(a, b, _rand(22, 300, 530))
    torch.testing.assert_close(grad_a, _rand(22, 300, 530) @ b.T, **FP32)


def test_linear_backward_bf16_within_bf16_rounding_of_fp32_gradients():
    x, weight = _rand(23, 160, 96, dtype=torch.bfloat16), _rand(24, 96, 200, dtype=torch.bfloat16)
    grad_out = _rand(25, 160, 200, dtype=torch.bfloat16)
    grad_x, grad_weight, grad_bias = mm.linear_backward(x, weight, grad_out)
    assert grad_x.dtype == grad_weight.dtype == grad_bias.dtype == torch.bfloat16
    g = grad_out.float()
    torch.testing.assert_close(grad_x.float(), g @ weight.float().T, rtol=2e-2, atol=1e-1)
    torch.testing.assert_close(grad_weight.float(), x.float().T @ g, rtol=2e-2, atol=1e-1)
    torch.testing.assert_close(grad_bias.float(), g.sum(0), rtol=2e-2, atol=1e-1)


def test_matmul_1024_cubed_fits_on_chip_in_timing_only_mode():
    shape = nki.ShapeDtype((1024, 1024), "bfloat16")
    run = nki.run(mm.matmul, shape, shape, timing_only=True)
    matmul_flops = sum(r.flops for r in run.timeline if r.opcode == "nc_matmul")
    assert matmul_flops == 2 * 1024 ** 3                 # the transposes of a are counted apart


def test_contraction_mismatch_names_both_sizes():
    with pytest.raises(ValueError, match=r"contraction sizes differ: x \[M, K\] has K=3, weight .* has K=4"):
        mm.linear(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))


@settings(max_examples=4, deadline=None)
@given(M=SIZES, K=SIZES, N=SIZES)
def test_linear_with_nn_linear_weight_layout_forward_and_backward(M, K, N):
    x = _rand(26, M, K).requires_grad_()
    weight = _rand(27, N, K).requires_grad_()           # [out, in], as nn.Linear stores it
    bias = _rand(28, N).requires_grad_()
    out = torch.nn.functional.linear(x, weight, bias)
    torch.testing.assert_close(mm.linear(x.detach(), weight.detach(), bias.detach(), None, "out_in"), out, **FP32)
    grad_out = _rand(29, M, N)
    out.backward(grad_out)
    grads = mm.linear_backward(x.detach(), weight.detach(), grad_out, "out_in")
    for grad, leaf in zip(grads, (x, weight, bias)):
        torch.testing.assert_close(grad, leaf.grad, **FP32)


def test_lm_head_tied_to_the_token_table():
    table = _rand(30, 43, 64)                          # wte [V, C] doubles as lm_head.weight [out=V, in=C]
    x = _rand(31, 70, 64)
    torch.testing.assert_close(mm.linear(x, table, None, None, "out_in"), x @ table.T, **FP32)
