"""trnlab.kernels.elementwise: residual / gradient addition against torch.

fp32 is exact (one fp32 add, as torch). bf16: both sides add in fp32 and round once, so exact too.
"""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import elementwise


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 2100))
def test_add_is_exact_on_any_shape(rows, cols):
    generator = torch.Generator().manual_seed(rows * cols)
    a, b = torch.randn(rows, cols, generator=generator), torch.randn(rows, cols, generator=generator)
    torch.testing.assert_close(elementwise.add(a, b), a + b, rtol=0, atol=0)


def test_add_bf16_rounds_once_like_torch():
    a, b = torch.randn(130, 64).bfloat16(), torch.randn(130, 64).bfloat16()
    out = elementwise.add(a, b)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_add_refuses_different_shapes():
    with pytest.raises(ValueError, match=r"add: shapes differ: a \(2, 3\), b \(3, 2\)"):
        elementwise.add(torch.zeros(2, 3), torch.zeros(3, 2))


def test_add_runs_in_timing_only_mode():
    x = nki.ShapeDtype((512, 128), "bfloat16")
    run = nki.run(elementwise.add, x, x, timing_only=True)
    assert run.outputs is None and run.latency_us > 0
