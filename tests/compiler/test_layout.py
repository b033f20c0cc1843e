"""layout: weights stored pre-transposed ([in, out], K on the partitions), no transposes on chip."""
import numpy as np
import torch

from helpers import evaluate_graph, graph_after


def test_every_linear_weight_is_pre_transposed(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "layout")
    linears = [n for n in g.nodes if n.op == "linear"]
    assert all(n.attrs["weight_layout"] == "in_out" for n in linears)
    qkv = model.blocks[0].attn.qkv.weight.detach().numpy()
    w = g.constants[linears[0].inputs[1]]
    np.testing.assert_array_equal(w, qkv.T)
    assert w.flags["C_CONTIGUOUS"]
    assert g.meta["pass_stats"]["layout"]["weights_transposed"] == 9
    with torch.no_grad():
        expected, _ = model(idx)
    torch.testing.assert_close(evaluate_graph(g, idx)[0], expected, rtol=1e-4, atol=1e-5)


def test_layout_pass_removes_the_weight_transposes_from_the_run(mlp):
    import trnlab.compiler as tc
    from trnlab.compiler.passes import PIPELINE, layout
    model, x = mlp
    with_layout = tc.compile(model, (x,)).run(x).profile
    saved = list(PIPELINE)
    PIPELINE.remove(layout)
    try:
        without = tc.compile(model, (x,)).run(x).profile
    finally:
        PIPELINE[:] = saved
    t_with = sum(o.transpose_ns for o in with_layout.ops)
    t_without = sum(o.transpose_ns for o in without.ops)
    assert t_without > t_with                                        # out_in weights: transposed per call
    assert with_layout.total_ns < without.total_ns


def test_position_rows_are_stored_broadcast_and_ids_int32(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "layout")
    assert "broadcast" not in g.ops()
    assert all(a.dtype != np.int64 for a in g.constants.values())
