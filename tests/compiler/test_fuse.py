"""fuse: attention and matmul+bias+activation become one op each; a look-alike that is not causal
attention is left alone (the rule confirms each match by evaluating it)."""
import math

import torch
import torch.nn.functional as F

from helpers import evaluate_graph, graph_after


def test_gpt_attention_and_linears_are_fused(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "fuse")
    ops = g.ops()
    assert ops["attention"] == 2 and ops["linear"] == 2 * 4 + 1
    assert not {"softmax", "batch_matmul", "matmul", "where", "slice"} & set(ops)
    fc = [n for n in g.nodes if n.op == "linear" and n.attrs["activation"] == "gelu"]
    assert len(fc) == 2                                           # gelu rides on the PSUM exit
    assert g.meta["pass_stats"]["fuse"] == {"fuse_attention": 2, "fuse_linear": 9, "fuse_residual": 4,
                                            "fuse_rms_norm": 0}
    assert ops["add"] == 1                                        # wte + wpe; both residual adds per block fused
    with torch.no_grad():
        expected, _ = model(idx)
    torch.testing.assert_close(evaluate_graph(g, idx)[0], expected, rtol=1e-4, atol=1e-5)


def test_residual_add_rides_on_the_linear_and_keeps_the_numbers(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "fuse")
    fused = [n for n in g.nodes if n.op == "linear" and n.attrs.get("residual")]
    assert len(fused) == 4 and all(len(n.inputs) == 4 for n in fused)      # x, w, bias, residual
    # the residual is the stream the add read: a [B*T, C] view of the block's input
    assert all(tuple(g.values[n.inputs[-1]].shape) == tuple(g.values[n.name].shape) for n in fused)


def test_mlp_relu_and_tanh_fuse_into_their_linears(mlp):
    model, x = mlp
    g, _ = graph_after(model, (x,), "fuse")
    assert g.ops() == {"linear": 3}
    assert [n.attrs["activation"] for n in g.nodes] == ["relu", "tanh", None]
    assert all(n.attrs["weight_layout"] == "out_in" for n in g.nodes)      # nn.Linear's [out, in]


class NotCausal(torch.nn.Module):
    """Looks like attention (slices of one qkv, softmax between two bmms) but has no causal mask."""

    def forward(self, qkv):
        B, T, C3 = qkv.shape
        q, k, v = qkv.split(C3 // 3, dim=2)
        q, k, v = (t.view(B, T, 2, -1).transpose(1, 2) for t in (q, k, v))
        att = F.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1)), dim=-1)
        return (att @ v).transpose(1, 2).reshape(B, T, -1)


def test_a_non_causal_lookalike_is_not_fused():
    g, _ = graph_after(NotCausal(), (torch.randn(2, 8, 48),), "fuse")
    assert "attention" not in g.ops() and "softmax" in g.ops()


def test_fusions_option_replaces_the_rule_list(tiny_gpt):
    from trnlab.compiler.passes.fuse import fuse_linear
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "fuse", fusions=[fuse_linear])
    assert "attention" not in g.ops() and g.ops()["linear"] == 9 and g.ops()["add"] == 5   # residuals not fused
