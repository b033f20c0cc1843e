"""Feedback names the cause: for a typical wrong answer, the check's hint says which part is wrong
(not only "expected X, got Y"), and the reference answer still passes."""
from __future__ import annotations

from trnlab.course.exercises import run_check
from trnlab.hardware import presets


def dma_without_the_hbm_cap(rows, cols, dtype_bytes):
    spec = presets.TRN2.core
    engines = min(spec.dma_engines, -(-rows // 8))
    row_ns = max(cols * dtype_bytes / spec.dma_engine_bandwidth * 1e9, spec.dma_descriptor_ns)
    return spec.dma_latency_ns + -(-rows // engines) * row_ns


def dma_the_old_notebook_formula(rows, cols, dtype_bytes):       # 1 µs and min(rows, 16) engines, no descriptors
    spec = presets.TRN2.core
    nbytes = rows * cols * dtype_bytes
    return 1000.0 + nbytes / min(min(rows, 16) * spec.dma_engine_bandwidth, spec.hbm_bandwidth) * 1e9


def test_dma_time_feedback_names_the_missing_hbm_limit():
    result = run_check("nb04_dma_time", dma_without_the_hbm_cap, local=True)
    assert result.status == "failed" and "HBM bandwidth limit is missing" in result.message


def test_dma_time_feedback_for_an_unrecognised_formula_spells_out_the_model():
    result = run_check("nb04_dma_time", dma_the_old_notebook_formula, local=True)
    assert result.status == "failed"
    assert "one per 8 rows" in result.message and "dma_descriptor_ns" in result.message


def fusion_that_assumes_a_bias(g):
    producers, users = g.producers(), g.users()
    for mm in list(g.nodes):
        if mm.op != "matmul":
            continue
        x, w = mm.inputs
        w = producers[w].inputs[0]
        add = users[mm.name][0]                          # taken as the bias add without looking
        other = add.inputs[-1]
        bias = producers[other].inputs[0] if other in producers and producers[other].op == "broadcast" else other
        last, activation = add.name, None
        readers = users.get(last, [])
        if len(readers) == 1 and readers[0].op == "relu":
            activation, last = "relu", readers[0].name
        out = g.values[last]
        node = g.add_node("linear", [x, w, bias], out.shape, out.dtype,
                          {"activation": activation, "weight_layout": "out_in"}, mm.source, before=mm)
        g.replace_uses(last, node.name)
        g.remove_unused()
        return 1
    return 0


def test_a_fusion_rule_that_assumes_a_bias_is_told_the_model_has_none():
    result = run_check("nb06_fuse_linear", fusion_that_assumes_a_bias, local=True)
    assert result.status == "failed"
    assert "no biases" in result.message and "reads 'mm'" in result.message
    assert "cycle" not in result.message


def test_a_fusion_rule_that_always_reports_progress_ends_with_a_reason():
    result = run_check("nb06_fuse_linear", lambda g: 1, local=True)
    assert result.status == "failed" and "return 0 when it found nothing to fuse" in result.message


def test_step_flops_feedback_names_a_missing_attention_matmul_and_decomposes_otherwise():
    one_attention = lambda L, C, V, B, T: 6 * (L * 12 * C * C + V * C) * B * T + 6 * L * B * T * T * C  # noqa: E731
    result = run_check("nb07_step_flops", one_attention, local=True)
    assert result.status == "failed" and "only one of the two attention matmuls" in result.message
    result = run_check("nb07_step_flops", lambda L, C, V, B, T: 123.0, local=True)
    assert "6·N·tokens =" in result.message and "matmul weights" in result.message
