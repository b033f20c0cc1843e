"""Training steps of zoo models through torch.compile(backend="trnlab"): AOT Autograd's forward and
backward graphs both run on the simulated chip; the loss and every gradient match eager PyTorch."""
import copy

import numpy as np

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from trnlab.compiler import dynamo, zoo

LOSS_REL, GRAD_REL = 1e-5, 1e-4          # fp32
ZERO_GRAD_REL = 1e-3                     # a gradient that is zero in exact arithmetic, against the model's largest


pytestmark = pytest.mark.usefixtures("fresh_dynamo")      # tests/compiler/conftest.py


class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return F.cross_entropy(self.model(x), y)


def _step_matches_eager(model, x, classes):
    y = torch.randint(0, classes, (x.shape[0],), generator=torch.Generator().manual_seed(1))
    compiled_model, eager = WithLoss(model), WithLoss(copy.deepcopy(model))
    loss = torch.compile(compiled_model, backend="trnlab")(x, y)
    loss.backward()
    ref = eager(x, y)
    ref.backward()
    assert abs(float(loss.detach()) - float(ref.detach())) <= LOSS_REL * abs(float(ref.detach()))
    _same_gradients(compiled_model, eager)
    for a, b in zip(compiled_model.buffers(), eager.buffers()):          # batch norm's running statistics
        assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6)
    return dynamo.backend.last_training


def _same_gradients(model, eager):
    """Each gradient within GRAD_REL of its largest element — or, for a gradient that is zero in exact
    arithmetic (a convolution's bias before a batch norm: eager's is below 1e-3 of the model's largest,
    fp32 rounding of a cancellation), within ZERO_GRAD_REL of the model's largest gradient."""
    largest = max(float(q.grad.abs().max()) for q in eager.parameters())
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        assert p.grad is not None, name
        own = float(q.grad.abs().max())
        tolerance = GRAD_REL * own if own >= 1e-3 * largest else ZERO_GRAD_REL * largest
        assert float((p.grad - q.grad).abs().max()) <= tolerance, name


@pytest.mark.parametrize("name", zoo.TRAINABLE)
def test_zoo_training_step_matches_eager_loss_and_gradients(name):
    """Includes batch norm in training mode (LeNet, ResNet): the batch's statistics on the chip, the
    running statistics updated as PyTorch does."""
    model, x = zoo.zoo()[name]
    with torch.no_grad():
        classes = model(x).shape[-1]
    programs = _step_matches_eager(model.train(), x, classes)
    assert programs["backward"].last_run.latency_ns > 0                    # the backward ran on the chip


def test_cnn_backward_is_im2col_matmuls_and_col2im_on_the_chip():
    programs = _step_matches_eager(zoo.SmallCNN().train(), torch.randn(2, 1, 12, 12), 4)
    kernels = {c.kernel for c in programs["backward"].calls if c.kind == "kernel"}
    assert {"conv.col2im", "conv.im2col", "conv.pool2d_backward", "pointwise.relu_backward"} <= kernels


@pytest.mark.parametrize("conv", [nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.Conv2d(3, 4, 1),
                                  nn.Conv2d(3, 4, 3, dilation=2, padding=2), nn.Conv1d(3, 4, 3, padding=1)])
def test_convolution_gradients_match_eager(conv):
    torch.manual_seed(2)
    x = torch.randn((2, 3, 7, 7) if isinstance(conv, nn.Conv2d) else (2, 3, 9))
    model = nn.Sequential(conv, nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))
    model(x)                                                                  # materialise the lazy layer
    _step_matches_eager(model, x, 3)


def test_mlp_relu_training_step_matches_eager():
    torch.manual_seed(3)
    _step_matches_eager(zoo.MLP(activation="relu"), torch.randn(8, 32), 10)


def _dropout_step(seed: int):
    torch.manual_seed(seed)
    model = zoo.MLP(activation="relu", dropout=0.25).train()
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    compiled = torch.compile(WithLoss(model), backend="trnlab")
    losses = []
    for _ in range(2):
        model.zero_grad()
        loss = compiled(x, y)
        loss.backward()
        losses.append(float(loss.detach()))
    forward = dynamo.backend.last_training["forward"]
    device = [forward.graph.outputs[k] for kind, k in forward.outputs if kind == "device"]   # the run's outputs
    keep = [o for o in device if o.endswith("_keep")][0]
    mask = torch.as_tensor(np.asarray(forward.last_run.outputs[device.index(keep)]))
    return model, x, y, losses, mask


def test_dropout_mask_comes_from_the_chip_rng_reproducibly_and_gradients_follow_it():
    model, x, y, losses, mask = _dropout_step(0)
    assert set(mask.unique().tolist()) <= {0.0, 1.0} and 0.5 < float(mask.mean()) < 0.95     # p = 0.25
    torch._dynamo.reset()
    dynamo.register()
    _, _, _, again, mask_again = _dropout_step(0)
    assert again == losses and torch.equal(mask, mask_again)          # the same seed, the same masks
    assert losses[0] != losses[1]                                      # a new mask every step
    eager = copy.deepcopy(model)                                       # the last step, eager, with the same mask
    eager.zero_grad()
    h = F.relu(eager.fc1(x)) * mask / 0.75
    loss = F.cross_entropy(eager.fc2(h), y)
    loss.backward()
    assert abs(float(loss.detach()) - losses[1]) <= LOSS_REL * float(loss.detach())
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        assert float((p.grad - q.grad).abs().max()) <= GRAD_REL * float(q.grad.abs().max()), name


class ProjectionLoss(nn.Module):
    """mean(model(x) * r) for a fixed random r (not mean(y²): after a layer norm its gradient is zero in
    exact arithmetic, and the comparison would be of rounding noise)."""

    def __init__(self, model, r):
        super().__init__()
        self.model, self.r = model, r

    def forward(self, x):
        return (self.model(x) * self.r).mean()


@pytest.mark.parametrize("name", ["llama", "llama_nn_rmsnorm", "vit", "encoder"])
def test_transformer_blocks_train_rmsnorm_rotary_sdpa_swiglu(name):
    """RMSNorm (written out and nn.RMSNorm), rotary embeddings, causal and non-causal SDPA (its backward as
    batched matmuls), SwiGLU, a patch convolution, nn.TransformerEncoderLayer (select's gradient): loss
    and gradients as eager PyTorch (dropout off: its mask comes from the chip's RNG, tested above)."""
    model, x = zoo.zoo()[name]
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0
    with torch.no_grad():
        r = torch.randn(model(x).shape, generator=torch.Generator().manual_seed(5))
    compiled_model, eager = ProjectionLoss(model.train(), r), ProjectionLoss(copy.deepcopy(model), r)
    loss = torch.compile(compiled_model, backend="trnlab")(x)
    loss.backward()
    ref = eager(x)
    ref.backward()
    assert abs(float(loss.detach()) - float(ref.detach())) <= LOSS_REL * abs(float(ref.detach()))
    _same_gradients(compiled_model, eager)
