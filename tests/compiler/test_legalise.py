"""legalise: core ATen ops become our ops; an op without a rule stays aten.* (and is refused later)."""
import torch

from helpers import evaluate_graph, graph_after


def test_addmm_becomes_matmul_plus_broadcast_bias(mlp):
    model, x = mlp
    g, _ = graph_after(model, (x,), "legalise")
    ops = g.ops()
    assert "aten.addmm.default" not in ops
    assert ops["matmul"] == 3 and ops["add"] == 3 and ops["broadcast"] == 3
    assert ops["relu"] == 1 and ops["tanh"] == 1


def test_gpt_has_only_our_ops_after_legalise(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "legalise")
    assert not [n.op for n in g.nodes if n.op.startswith("aten.")]
    assert {"embedding", "layer_norm", "softmax", "batch_matmul", "slice", "where", "gelu"} <= set(g.ops())


def test_legalised_graph_computes_the_same_as_the_model(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "legalise")
    with torch.no_grad():
        expected, _ = model(idx)
    torch.testing.assert_close(evaluate_graph(g, idx)[0], expected, rtol=1e-5, atol=1e-5)


class Cumsum(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)


def test_an_op_without_a_rule_stays_aten():
    g, _ = graph_after(Cumsum(), (torch.randn(4, 8),), "legalise")
    assert g.ops() == {"aten.cumsum.default": 1}
