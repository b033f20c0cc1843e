"""The model zoo (trnlab.compiler.zoo) compiled for inference and run on the simulated chip, each
checked against eager PyTorch; and the pieces the zoo needs, one concept per test."""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trnlab.compiler as tc
from trnlab.compiler import zoo
from trnlab.compiler.lower_nn import binary_views, permute_steps

FP32_REL = 1e-4          # |compiled - eager|_max / |eager|_max, fp32


def _rel(y, ref) -> float:
    y = torch.as_tensor(np.asarray(y[0] if isinstance(y, (tuple, list)) else y))
    return ((y - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_model_matches_eager_pytorch_fp32(name):
    model, x = zoo.zoo()[name]
    model.eval()
    compiled = tc.compile(model, (x,))
    with torch.no_grad():
        ref = model(x)
    assert _rel(compiled(x), ref) <= FP32_REL
    assert not any(n.op.startswith("aten.") for n in compiled.graph.nodes)       # every op on the device
    assert len(compiled.programs) == 1                                           # one program, no host op


BF16_REL = 2e-2          # autocast="matmult": bf16 operands (8 significant bits), fp32 accumulation (measured <= 6e-3)


@pytest.mark.parametrize("name", ["lenet", "llama", "encoder", "vit"])
def test_zoo_model_under_bf16_autocast_is_within_the_stated_tolerance(name):
    model, x = zoo.zoo()[name]
    model.eval()
    compiled = tc.compile(model, (x,), autocast="matmult")
    with torch.no_grad():
        ref = model(x)
    assert _rel(torch.as_tensor(np.asarray(compiled(x))).float(), ref) <= BF16_REL


@pytest.mark.parametrize("name", ["lenet", "llama", "encoder"])
def test_zoo_model_through_torch_compile_matches_eager(name):
    """The Dynamo entry point too; nn.TransformerEncoderLayer in eval takes PyTorch's fast path there
    (`_transformer_encoder_layer_fwd`, one op), which legalise_nn writes out."""
    from trnlab.compiler import dynamo
    torch._dynamo.reset()
    dynamo.register()
    model, x = zoo.zoo()[name]
    model.eval()
    with torch.no_grad():
        y = torch.compile(model, backend="trnlab")(x)
        assert _rel(y, model(x)) <= FP32_REL
    assert dynamo.backend.last is not None and len(dynamo.backend.last.programs) == 1
    torch._dynamo.reset()


def test_convolution_pass_shows_the_im2col_layout_in_the_graph():
    model, x = zoo.zoo()["lenet"]
    compiled = tc.compile(model.eval(), (x,))
    after = next(r.graph for r in compiled.passes if r.name == "convolution")
    text = after.to_text()
    assert "im2col(" in text and "layout=NHWC" in text and "conv2d" not in text
    stats = after.meta["pass_stats"]["convolution"]
    assert stats["im2col"] == 2 and stats["pools"] == 2
    assert stats["cancelled"] >= 1                      # activations stay NHWC between conv and pool


@pytest.mark.parametrize("conv", [
    nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4, bias=False),
    nn.Conv2d(4, 8, 1), nn.Conv2d(4, 6, (3, 1), stride=(1, 2), padding=(1, 0), groups=2),
    nn.Conv1d(4, 6, 5, stride=2, padding=2), nn.Conv1d(4, 4, 3, padding=1, dilation=1, groups=2)])
def test_convolution_stride_padding_dilation_groups_match_pytorch(conv):
    torch.manual_seed(1)
    x = torch.randn((2, 4, 9, 10) if isinstance(conv, nn.Conv2d) else (2, 4, 17))
    with torch.no_grad():
        ref = conv(x)
    assert _rel(tc.compile(conv.eval(), (x,))(x), ref) <= FP32_REL


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, stride=2, padding=1), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(2),
                                  nn.AvgPool2d(3, stride=1, padding=1)])
def test_pooling_matches_pytorch(pool):
    x = torch.randn(2, 3, 8, 8)
    assert _rel(tc.compile(pool, (x,))(x), pool(x)) <= FP32_REL


class _Elementwise(nn.Module):
    def forward(self, x, y):
        a = 2.0 - x * 3.0 + 1.5                              # numbers on either side
        b = (x - y) / (y.abs() + 1.0)                        # tensors, a broadcast row
        c = torch.sigmoid(x) * torch.tanh(y) + F.silu(x) + F.relu(y) + F.gelu(x, approximate="tanh")
        d = x / x.sum(-1, keepdim=True).abs().clamp_min(1.0) if False else x / (x.pow(2).mean(-1, keepdim=True) + 1)
        return a + b + c + d + torch.exp(-x.abs()).amax(-1, keepdim=True)


def test_standalone_activations_and_arithmetic_with_numbers_and_broadcasts():
    torch.manual_seed(2)
    x, y = torch.randn(3, 5, 16), torch.randn(16)
    model = _Elementwise()
    compiled = tc.compile(model, (x, y))
    assert _rel(compiled(x, y), model(x, y)) <= FP32_REL


class _Shapes(nn.Module):
    def forward(self, x, w):
        t = x.permute(2, 0, 3, 1)                            # no single block swap: several steps
        s = torch.cat([x[:, 1:3], x.select(1, 0).unsqueeze(1)], dim=1)
        return t.sum() + (torch.matmul(x, w) * 2).mean(dim=(1, 2)).sum() + s.mean()


def test_shape_ops_and_broadcast_batched_matmul():
    torch.manual_seed(3)
    x, w = torch.randn(2, 4, 3, 5), torch.randn(5, 6)
    model = _Shapes()
    assert _rel(tc.compile(model, (x, w))(x, w), model(x, w)) <= FP32_REL


def test_causal_sdpa_goes_onto_the_attention_kernel():
    model, x = zoo.zoo()["llama"]
    compiled = tc.compile(model.eval(), (x,))
    kernels = [c.kernel for c in compiled.program.calls if c.kind == "kernel"]
    assert "attention.causal_attention" in kernels
    assert "batch_matmul" not in compiled.graph.ops()                          # no scores in HBM


def test_nn_rmsnorm_and_its_decomposition_agree_compiled():
    torch.manual_seed(4)
    x = torch.randn(4, 32)
    for norm in (nn.RMSNorm(32, eps=1e-6), zoo.RMSNorm(32)):
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
        compiled = tc.compile(norm, (x,))
        assert _rel(compiled(x), norm(x)) <= FP32_REL
        assert compiled.graph.ops() == {"rms_norm": 1}                        # one kernel (fuse_rms_norm)


def test_binary_views_pick_row_or_column_broadcast():
    assert binary_views((2, 16, 32), (2, 16, 32), (2, 16, 1)) == ([32, 32], [32, 1])
    assert binary_views((2, 16, 32), (2, 16, 32), (32,)) == ([32, 32], [1, 32])
    assert binary_views((2, 4, 8), (2, 4, 8), (2, 1, 8)) is None              # a middle broadcast: no mode


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [0, 3, 1, 2], [2, 0, 3, 1], [3, 2, 1, 0], [1, 0, 2, 3]])
def test_permute_steps_compose_to_the_permutation(perm):
    shape = [2, 3, 4, 5]
    x = np.arange(np.prod(shape)).reshape(shape)
    y = x
    for kind, view, local in permute_steps(shape, perm):
        y = y.transpose(local)
    assert np.array_equal(y, x.transpose(perm))


def test_unsupported_op_error_gives_advice_for_both_entry_points():
    class Sort(nn.Module):
        def forward(self, x):
            return torch.sort(x, dim=-1).values * 2
    x = torch.randn(4, 8)
    with pytest.raises(tc.CompileError) as err:
        tc.compile(Sort(), (x,))
    text = str(err.value)
    assert "sort" in text and "fallback=True" in text and "options={\"fallback\": True}" in text


def test_docs_op_table_lists_every_supported_op():
    import pathlib
    text = (pathlib.Path(__file__).parents[2] / "docs" / "compiler.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| `")]
    listed = {name.strip("` ") for line in table for name in line.split("|")[1].split(",")}
    assert set(tc.SUPPORTED) <= listed, set(tc.SUPPORTED) - listed
