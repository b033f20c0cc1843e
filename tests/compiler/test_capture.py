"""Capture: torch.export -> core ATen -> our graph IR, with shapes, dtypes, weights and source lines."""
import pytest
import torch

import trnlab.compiler as tc
from trnlab.compiler import capture


def test_export_capture_keeps_shapes_dtypes_and_source_lines(tiny_gpt):
    model, idx = tiny_gpt
    g, times = capture.capture_export(model, (idx,))
    assert g.inputs == ["idx"] and g.values["idx"].shape == (2, 16) and g.values["idx"].dtype == "int64"
    assert {"torch.export", "decompose", "to IR"} <= set(times)
    assert all(n.op.startswith("aten.") for n in g.nodes)          # core ATen until legalise
    addmm = [n for n in g.nodes if n.op == "aten.addmm.default"]
    assert len(addmm) == 2 * 4                                       # qkv, proj, fc, proj per layer
    assert all(n.source.startswith(("gpt.py:", "linear.py")) or "gpt.py" in n.source for n in addmm)
    logits = g.values[g.outputs[0]]
    assert logits.shape == (2, 16, 20) and logits.dtype == "float32"
    assert g.meta["output_spec"] == [0, None]                        # (logits, loss=None)


def test_tied_weights_become_one_constant(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = capture.capture_export(model, (idx,))
    params = [v for v in g.values.values() if v.kind == "param"]
    assert len(params) == len(list(model.parameters()))             # the tied head is stored once
    assert sum(v.nbytes for v in params) == 4 * sum(p.numel() for p in model.parameters())


def test_graph_text_is_readable_like_hlo(tiny_gpt):
    model, idx = tiny_gpt
    g, _ = capture.capture_export(model, (idx,))
    text = g.to_text()
    assert text.startswith("graph GPT") and "input %idx : i64[2, 16]" in text
    assert "f32[2, 16, 20]" in text and "# gpt.py:" in text


def test_graph_json_round_trip(compiled_tiny_gpt):
    g = compiled_tiny_gpt.graph
    again = tc.Graph.from_json(g.to_json(), g.constants)
    assert again.to_text() == g.to_text()


def test_dynamic_shapes_are_refused_with_a_clear_error(tiny_gpt):
    model, idx = tiny_gpt
    with pytest.raises(tc.DynamicShapeError, match="one graph per input shape"):
        tc.compile(model, (idx,), dynamic_shapes={"idx": {1: torch.export.Dim("T")}})


def test_calling_with_another_shape_is_refused(compiled_tiny_gpt, tiny_gpt):
    _, idx = tiny_gpt
    with pytest.raises(tc.DynamicShapeError, match=r"compiled as \[2, 16\], called with \[2, 15\]"):
        compiled_tiny_gpt(idx[:, :15])


def test_dynamo_backend_compiles_the_forward_through_aot_autograd(mlp):
    from trnlab.compiler import dynamo
    model, x = mlp
    compiled = torch.compile(model, backend="trnlab")
    with torch.no_grad():
        y = compiled(x)
        expected = model(x)
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-5)
    last = dynamo.backend.last
    assert last.graph.ops().get("linear") == 3                      # fused like the export path
    assert any(v.kind == "param" for v in last.graph.values.values())
    torch._dynamo.reset()
