"""The "predict, then measure" exercise of notebook 10: a kernel's speed-up from one Trn2 core to one
Trn3 core, predicted from the presets and measured on the simulator (timing-only), each prediction
within 10 % of the measurement — the verdicts of the reference, a reasoned-but-different, a lazy and a
wrong answer, with feedback that names the kernel, its bound and the limit that moved."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnlab.course.exercises import run_check
from trnlab.course.solve import SOLUTIONS_DIR
from trnlab.hardware import presets

SEED = 3
TRN2, TRN3 = presets.CORES["trn2"], presets.CORES["trn3"]


def _solution(grade_id: str, wrong: bool = False):
    namespace: dict = {}
    exec(Path(SOLUTIONS_DIR, f"{grade_id}{'.wrong' if wrong else ''}.py").read_text(), namespace)
    return namespace


@pytest.fixture(scope="module", autouse=True)
def measured() -> dict[str, float]:
    """Every case's kernel measured once on both cores, before any answer runs (the judge's cache)."""
    from trnlab.course.checks import nb10_generations
    from trnlab.course.exercises import draw_cases, get, part_seed

    cases = draw_cases(get("nb10_generation_speedup").spec, part_seed(SEED, 0))
    return {c["label"]: nb10_generations.kernel_latency_us(c, "trn2") / nb10_generations.kernel_latency_us(c, "trn3")
            for c in cases}


def _cases() -> list[dict]:
    from trnlab.course.exercises import draw_cases, get, part_seed

    return draw_cases(get("nb10_generation_speedup").spec, part_seed(SEED, 0))


def _roofline_speedup(fixed_us: float, bandwidth):
    """old time / new time with `fixed_us` of fixed cost plus max(compute, bytes / bandwidth(core))."""
    def time_us(flops, hbm_bytes, core):
        return fixed_us + max(flops / core.peak_flops("bfloat16"), hbm_bytes / bandwidth(core)) * 1e6

    return lambda flops, hbm_bytes: time_us(flops, hbm_bytes, TRN2) / time_us(flops, hbm_bytes, TRN3)


def _dma_rate(core):
    return min(core.hbm_bandwidth, core.dma_engines * core.dma_engine_bandwidth)


def test_the_cases_span_the_three_bounds(measured):
    # compute-bound and latency-bound kernels barely move from Trn2 to Trn3; memory-bound ones do
    assert 0.97 < measured["linear [2048, 2048] @ [2048, 2048] (a wide model's MLP)"] < 1.03
    assert 1.35 < measured["residual add [4096, 2048]"] < 1.50 and 1.35 < measured["GELU [4096, 2048]"] < 1.50
    assert 1.0 <= measured["layer_norm [32, 64] (the tiny GPT's ln_1)"] < 1.05


def test_speedup_reference_solution_passes():
    result = run_check("nb10_generation_speedup", _solution("nb10_generation_speedup")["predict_speedup"],
                       seed=SEED, local=True)
    assert result.passed, result.message


def test_speedup_reasoned_but_different_passes():
    # one DMA start latency of fixed cost instead of the reference's two: within the 10 % target
    answer = _roofline_speedup(TRN2.dma_latency_ns / 1e3, _dma_rate)
    result = run_check("nb10_generation_speedup", answer, seed=SEED, local=True)
    assert result.passed, result.message


def test_speedup_lazy_flops_ratio_is_told_which_kernel_was_not_compute_bound(measured):
    # the marketing reading: a chip's bf16 peak ratio, 671 / 667, for every kernel
    chips = presets.CHIPS
    ratio = chips["trn3"].quoted_tflops["bfloat16"] / chips["trn2"].quoted_tflops["bfloat16"]
    result = run_check("nb10_generation_speedup", lambda flops, hbm_bytes: ratio, seed=SEED, local=True)
    assert result.status == "failed" and "residual add [4096, 2048], trn2 → trn3: prediction missed" in result.message
    add = measured["residual add [4096, 2048]"]
    assert f"measured speed-up {add:.2f}×" in result.message
    assert f"you predicted {ratio:.2f}× ({ratio / add - 1:+.0%})" in result.message
    assert "it is memory-bound" in result.message
    assert "not the peak 78.6 → 78.6 TFLOPS per core, 1.00×" in result.message


def test_speedup_copying_the_bandwidth_ratio_fails_on_the_compute_bound_kernel():
    # the hint copied: every kernel as fast as the bytes per second, 362 → 528 GB/s
    ratio = _dma_rate(TRN3) / _dma_rate(TRN2)
    result = run_check("nb10_generation_speedup", lambda flops, hbm_bytes: ratio, seed=SEED, local=True)
    assert result.status == "failed" and "linear [2048, 2048]" in result.message
    assert "you predicted 1.46× (+45%)" in result.message and "it is compute-bound" in result.message


def test_speedup_hbm_share_alone_is_told_the_dma_engines_limit_a_core(measured):
    # a per-core roofline with the core's share of the chip's HBM bandwidth: 1.69× for memory-bound kernels
    answer = _roofline_speedup(2 * TRN2.dma_latency_ns / 1e3, lambda core: core.hbm_bandwidth)
    result = run_check("nb10_generation_speedup", answer, seed=SEED, local=True)
    add = measured["residual add [4096, 2048]"]
    predicted = answer(*[(c["flops"], c["hbm_bytes"]) for c in _cases() if c["label"] == "residual add [4096, 2048]"][0])
    assert result.status == "failed" and "residual add [4096, 2048]" in result.message
    assert predicted / add - 1 > 0.10 and f"({predicted / add - 1:+.0%})" in result.message
    assert "trn3 612 and 528 GB/s, so 362 → 528 GB/s, 1.46×" in result.message
    assert "not the HBM share alone (1.69×)" in result.message


def test_speedup_wrong_answer_without_fixed_costs_is_told_the_kernel_is_latency_bound(measured):
    wrong = _solution("nb10_generation_speedup", wrong=True)["predict_speedup"]
    result = run_check("nb10_generation_speedup", wrong, seed=SEED, local=True)
    assert result.status == "failed" and "layer_norm [32, 64] (the tiny GPT's ln_1)" in result.message
    from trnlab.course.checks.nb10_generations import kernel_latency_us

    case = [c for c in _cases() if c["label"] == "layer_norm [32, 64] (the tiny GPT's ln_1)"][0]
    predicted, norm = wrong(case["flops"], case["hbm_bytes"]), measured[case["label"]]
    assert f"you predicted {predicted:.2f}× ({predicted / norm - 1:+.0%})" in result.message
    assert "it is latency-bound" in result.message
    assert f"the roofline accounts for 0.02 µs of its {kernel_latency_us(case, 'trn2'):.2f} µs on trn2" in result.message
    assert "the runtime's start-up and tear-down of the launch, 12.7 µs on trn2 and 12.7 µs on trn3" in result.message


def test_speedup_refuses_a_non_positive_prediction():
    result = run_check("nb10_generation_speedup", lambda flops, hbm_bytes: 0.0, seed=SEED, local=True)
    assert result.status == "failed" and "expected a positive speed-up" in result.message
