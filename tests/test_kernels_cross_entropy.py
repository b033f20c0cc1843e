"""trnlab.kernels.cross_entropy: mean cross-entropy with ignore_index, and its backward, against torch.

Tolerances: fp32 rtol 1e-5 / atol 1e-5 on the loss (log-sum-exp in fp32 like torch); gradients are
softmax probabilities over the row count, atol 1e-6. bf16 logits: fp32 math on the bf16 values, the
gradient rounded once to bf16.
"""
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import cross_entropy as ce


def _case(seed, rows, vocab, ignore_every):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=generator) * 3
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    if ignore_every:
        targets[::ignore_every] = -100
    if (targets == -100).all():
        targets[-1] = 0
    return logits, targets


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), vocab=st.integers(2, 130), ignore_every=st.sampled_from([0, 2, 5]))
def test_cross_entropy_matches_torch_with_ignored_targets(rows, vocab, ignore_every):
    logits, targets = _case(rows * vocab, rows, vocab, ignore_every)
    loss = ce.cross_entropy(logits, targets.int())
    assert loss.shape == (1,)
    torch.testing.assert_close(loss[0], F.cross_entropy(logits, targets, ignore_index=-100), rtol=1e-5, atol=1e-5)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [50.0, 60.0, 70.0]])
    targets = torch.tensor([2, 0])
    loss = ce.cross_entropy(logits, targets.int())
    torch.testing.assert_close(loss[0], F.cross_entropy(logits, targets))


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), vocab=st.integers(2, 130), ignore_every=st.sampled_from([0, 3]))
def test_cross_entropy_backward_matches_autograd(rows, vocab, ignore_every):
    logits, targets = _case(rows + vocab, rows, vocab, ignore_every)
    leaf = logits.clone().requires_grad_()
    F.cross_entropy(leaf, targets).backward(torch.tensor(0.5))
    torch.testing.assert_close(ce.cross_entropy_backward(logits, targets.int(), torch.tensor([0.5])), leaf.grad,
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ce.cross_entropy_backward(logits, targets.int(), 0.5), leaf.grad,
                               rtol=1e-5, atol=1e-6)


def test_cross_entropy_bf16_logits():
    logits, targets = _case(3, 64, 43, 4)
    logits = logits.bfloat16()
    torch.testing.assert_close(ce.cross_entropy(logits, targets.int())[0], F.cross_entropy(logits.float(), targets),
                               rtol=1e-5, atol=1e-5)
    leaf = logits.float().requires_grad_()
    F.cross_entropy(leaf, targets).backward()
    grad = ce.cross_entropy_backward(logits, targets.int())
    assert grad.dtype == torch.bfloat16
    torch.testing.assert_close(grad.float(), leaf.grad, rtol=2 ** -8, atol=1e-6)


def test_cross_entropy_kernels_run_in_timing_only_mode():
    logits, targets = nki.ShapeDtype((512, 100), "float32"), nki.ShapeDtype((512,), "int32")
    for kernel in (ce.cross_entropy, ce.cross_entropy_backward):
        run = nki.run(kernel, logits, targets, timing_only=True)
        assert run.outputs is None and run.latency_us > 0
