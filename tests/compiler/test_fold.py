"""fold: identities go, compile-time constants are computed once, dead code is removed."""
import torch

from helpers import evaluate_graph, graph_after


def test_clones_and_identity_views_are_removed(tiny_gpt):
    model, idx = tiny_gpt
    before, _ = graph_after(model, (idx,), "legalise")
    after, _ = graph_after(model, (idx,), "fold")
    assert before.ops().get("copy", 0) > 0 and "copy" not in after.ops()
    assert len(after.nodes) < len(before.nodes)
    stats = after.meta["pass_stats"]["fold"]
    assert stats["identities"] > 0 and stats["folded"] > 0


def test_causal_mask_and_position_rows_are_folded_to_constants(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "fold")
    assert "logical_not" not in g.ops()                           # ~mask computed at compile time
    assert g.ops()["embedding"] == 1                               # wpe(arange(T)) is a constant now
    masks = [v for v in g.values.values() if v.kind == "const" and v.dtype == "bool"]
    assert len(masks) == 2                                         # one per layer


def test_folded_graph_still_computes_the_model(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "fold")
    with torch.no_grad():
        expected, _ = model(idx)
    torch.testing.assert_close(evaluate_graph(g, idx)[0], expected, rtol=1e-5, atol=1e-5)


class Dead(torch.nn.Module):
    def forward(self, x):
        unused = torch.relu(x) * 3.0  # noqa: F841  (dead: never returned)
        return x + 1.0


def test_dead_code_is_eliminated():
    g, _ = graph_after(Dead(), (torch.randn(4, 4),), "fold")
    assert g.ops() == {"add": 1}
