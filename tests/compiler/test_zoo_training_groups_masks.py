"""Training steps through torch.compile(backend="trnlab") for grouped and depthwise convolutions (1-D and
2-D) and for scaled_dot_product_attention with a boolean or a float mask: the loss and every gradient
match eager PyTorch, forward and backward each one program on the simulated chip."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.compiler.test_zoo_training import _step_matches_eager


pytestmark = pytest.mark.usefixtures("fresh_dynamo")      # tests/compiler/conftest.py


def _grouped_cnn(dims: int) -> nn.Module:
    """A grouped convolution (groups=2, strided, padded, dilated) then a depthwise one (groups=C)."""
    Conv = nn.Conv2d if dims == 2 else nn.Conv1d
    return nn.Sequential(Conv(4, 6, 3, padding=2, dilation=2, groups=2), nn.ReLU(),
                         Conv(6, 6, 3, stride=2, padding=1, groups=6), nn.ReLU(),
                         nn.Flatten(), nn.LazyLinear(3))


@pytest.mark.parametrize("dims", [2, 1])
def test_grouped_and_depthwise_convolution_gradients_match_eager(dims):
    torch.manual_seed(4)
    x = torch.randn((2, 4, 7, 7) if dims == 2 else (2, 4, 11))
    model = _grouped_cnn(dims)
    model(x)                                                                  # materialise the lazy layer
    programs = _step_matches_eager(model, x, 3)
    assert programs["backward"].last_run.latency_ns > 0                       # the backward ran on the chip


class MaskedAttention(nn.Module):
    """q, k, v projections, F.scaled_dot_product_attention(attn_mask=mask) (not causal), a classifier."""

    def __init__(self, mask: torch.Tensor, d: int = 8, heads: int = 2, classes: int = 3):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.head = nn.Linear(d, classes)
        self.register_buffer("mask", mask)

    def forward(self, x):                                                     # x [B, T, d]
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(B, T, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)      # [B, heads, T, d / heads]
        return self.head(y.transpose(1, 2).reshape(B, T, d).mean(dim=1))


T = 5
BOOL_MASK = (torch.rand(T, T, generator=torch.Generator().manual_seed(5)) > 0.4) | torch.eye(T, dtype=torch.bool)
FLOAT_MASK = torch.randn(T, T, generator=torch.Generator().manual_seed(6))
PER_BATCH_MASK = torch.randn(2, 1, T, T, generator=torch.Generator().manual_seed(8))   # broadcast over heads


@pytest.mark.parametrize("mask", [BOOL_MASK, FLOAT_MASK, PER_BATCH_MASK], ids=["bool", "float", "float_per_batch"])
def test_masked_attention_gradients_match_eager(mask):
    torch.manual_seed(7)
    x = torch.randn(2, T, 8)
    programs = _step_matches_eager(MaskedAttention(mask), x, 3)
    assert programs["backward"].last_run.latency_ns > 0
