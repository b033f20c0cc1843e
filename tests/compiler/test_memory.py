"""memory: weights resident, activations placed by liveness — no two live tensors share bytes."""
from hypothesis import given, settings, strategies as st

from helpers import graph_after


def _overlap(a, b):
    return a["live"][0] <= b["live"][1] and b["live"][0] <= a["live"][1] and \
        a["offset"] < b["offset"] + b["bytes"] and b["offset"] < a["offset"] + a["bytes"]


def test_live_tensors_never_share_bytes_and_reuse_saves_memory(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "memory")
    plan = g.meta["memory"]
    acts = [t for t in plan["tensors"].values() if t["level"] == "hbm" and t["bytes"]]
    assert not any(_overlap(a, b) for i, a in enumerate(acts) for b in acts[i + 1:])
    assert plan["arena_bytes"] < plan["without_reuse_bytes"]
    assert plan["resident_bytes"] >= sum(a.nbytes for a in g.constants.values())
    assert any(t.get("sbuf_candidate") for t in acts)


@settings(max_examples=6, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6))
def test_mlp_of_any_widths_gets_a_valid_plan(widths):
    import torch
    layers = []
    d = 8
    for w in widths:
        layers += [torch.nn.Linear(d, 8 * w), torch.nn.ReLU()]
        d = 8 * w
    model = torch.nn.Sequential(*layers).eval()
    g, _ = graph_after(model, (torch.zeros(4, 8),), "memory")
    acts = [t for t in g.meta["memory"]["tensors"].values() if t["level"] == "hbm" and t["bytes"]]
    assert not any(_overlap(a, b) for i, a in enumerate(acts) for b in acts[i + 1:])
