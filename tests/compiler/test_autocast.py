"""autocast: neuronx-cc's --auto-cast modes; matmul inputs to bf16, softmax and norms kept in fp32."""
import pytest
import torch

from helpers import evaluate_graph, graph_after


def _dtypes(g, op):
    return [(g.values[n.inputs[0]].dtype, g.values[n.name].dtype) for n in g.nodes if n.op == op]


def test_none_changes_nothing(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "autocast", autocast="none")
    assert {v.dtype for v in g.values.values() if v.kind == "node"} <= {"float32", "int64"}


def test_matmult_casts_matmul_inputs_and_keeps_norms_fp32(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "autocast", autocast="matmult")
    linears = [n for n in g.nodes if n.op == "linear"]
    assert all(g.values[n.inputs[0]].dtype == "bfloat16" for n in linears)
    # a linear's own output is bf16; one with a fused residual add keeps the residual stream's fp32
    assert all(g.values[n.name].dtype == ("float32" if n.attrs.get("residual") else "bfloat16") for n in linears)
    assert any(n.attrs.get("residual") for n in linears)
    assert all(g.values[n.inputs[1]].dtype == "bfloat16" for n in g.nodes if n.op == "linear")  # weights cast once
    assert all(i == o == "float32" for i, o in _dtypes(g, "layer_norm"))
    assert all(o == "float32" for _, o in _dtypes(g, "add"))       # the residual stream stays fp32
    assert g.values[g.outputs[0]].dtype == "float32"               # converted back for the caller
    converts = [n for n in g.nodes if n.op == "convert"]
    assert converts and all(g.values[n.inputs[0]].kind == "node" for n in converts)  # activations only


def test_all_keeps_softmax_and_norms_in_fp32(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "autocast", autocast="all")
    assert all(i == o == "float32" for i, o in _dtypes(g, "layer_norm"))
    assert {o for _, o in _dtypes(g, "add")} == {"bfloat16"}            # elementwise ops go bf16 too
    assert all(o == "bfloat16" for _, o in _dtypes(g, "linear"))


def test_matmult_stays_within_bf16_accuracy(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = graph_after(model, (idx,), "autocast", autocast="matmult")
    with torch.no_grad():
        expected, _ = model(idx)
    got = evaluate_graph(g, idx)[0]
    assert (got - expected).abs().max() / expected.abs().max() < 2e-2    # bf16: 8 significant bits


def test_unknown_mode_is_refused(tiny_gpt):
    model, idx = tiny_gpt
    with pytest.raises(ValueError, match="--auto-cast takes one of"):
        graph_after(model, (idx,), "autocast", autocast="fp8")
