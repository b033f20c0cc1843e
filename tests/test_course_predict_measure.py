"""The "predict, then measure" exercises: a performance target stated up front, the answer measured on
the simulator (or the package's step-time model) and judged against the reference — and the verdicts
of a wrong, a lazy and a reasoned-but-different answer, with feedback that names the broken limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnlab.course.exercises import run_check
from trnlab.course.solve import SOLUTIONS_DIR

SEED = 3


def _solution(grade_id: str, wrong: bool = False):
    namespace: dict = {}
    exec(Path(SOLUTIONS_DIR, f"{grade_id}{'.wrong' if wrong else ''}.py").read_text(), namespace)
    return namespace


# -- nb09: schedule a decode batch for a TPOT budget --------------------------------------------------


@pytest.fixture(scope="module")
def step_us() -> dict[int, float]:
    from trnlab.course.checks import nb09_inference

    return {b: nb09_inference.decode_step_us(b) for b in (1, 2, 4, 8, 16)}   # measured before any answer runs


def _best(step_us, budget):
    return max((b for b, us in step_us.items() if us <= budget), key=lambda b: b / step_us[b], default=0)


def test_decode_batch_reasoned_reference_passes(step_us):
    result = run_check("nb09_decode_batch", lambda budget: _best(step_us, budget), seed=SEED, local=True)
    assert result.passed, result.message


def test_decode_batch_with_headroom_passes_within_the_120_percent_target(step_us):
    # reasoned but different: keep a slot of every 8 free for a newcomer (7 instead of 8, 14 instead of 16)
    result = run_check("nb09_decode_batch", lambda budget: (b := _best(step_us, budget)) - b // 8,
                       seed=SEED, local=True)
    assert result.passed, result.message


def test_decode_batch_straight_line_breaks_the_budget_through_padding():
    wrong = _solution("nb09_decode_batch", wrong=True)["decode_batch"]
    result = run_check("nb09_decode_batch", wrong, seed=SEED, local=True)
    assert result.status == "failed"
    assert "TPOT budget 400 µs broken" in result.message and "batch 10's decode step" in result.message
    assert "10 sequences padded to bucket 16" in result.message and "over the budget" in result.message


def test_decode_batch_the_default_of_eight_breaks_a_tight_budget():
    result = run_check("nb09_decode_batch", lambda budget: 8, seed=SEED, local=True)
    assert result.status == "failed" and "TPOT budget 250 µs broken" in result.message and "batch 8's" in result.message


def test_decode_batch_of_one_is_safe_but_misses_the_throughput_target():
    result = run_check("nb09_decode_batch", lambda budget: 1, seed=SEED, local=True)
    assert result.status == "failed" and "throughput target missed" in result.message
    assert "batch 1 meets the budget" in result.message and "at most 120% of yours" in result.message and "a larger bucket still meets the budget" in result.message


def test_decode_batch_between_buckets_names_the_padding(step_us):
    # 12 sequences run in bucket 16: they pay its step for three quarters of its tokens
    answer = lambda budget: 12 if _best(step_us, budget) == 16 else _best(step_us, budget)  # noqa: E731
    result = run_check("nb09_decode_batch", answer, seed=SEED, local=True)
    assert result.status == "failed" and "12 sequences padded to bucket 16" in result.message
    assert "4 of the bucket's 16 rows are padding" in result.message


# -- nb08: a layout for two jobs, predicted then measured ---------------------------------------------

JOBS = {"70B-class": ("Trn2 UltraServer", 256), "7B-class": ("trn2.48xlarge", 64)}


def _measured_s(model_name: str, layout) -> float:
    from trnlab.distributed import scaling, topology

    system, batch = JOBS[model_name]
    return scaling.estimate(scaling.MODELS[model_name], topology.get(system), batch, *layout).total_ns / 1e9


def _reference():
    return _solution("nb08_plan_layout")["plan_layout"]


def _plan(layout_70b, predict_70b=None):
    """The reference's answer for the 7B job; `layout_70b` (predicted exactly, or `predict_70b(layout)`) for the 70B."""
    reference = _reference()

    def plan_layout(model_name, system, global_batch):
        if model_name != "70B-class":
            return reference(model_name, system, global_batch)
        predicted = predict_70b(layout_70b) if predict_70b else _measured_s("70B-class", layout_70b)
        return {"layout": layout_70b, "predicted_step_s": predicted}

    return plan_layout


def test_plan_layout_reference_solution_passes():
    assert run_check("nb08_plan_layout", _reference(), seed=SEED, local=True).passed


def test_plan_layout_reasoned_but_different_passes():
    # tp over a whole server, pp across the four servers: 8 % slower than the best, within the 120 % target
    result = run_check("nb08_plan_layout", _plan((1, 16, 4), lambda L: 1.02 * _measured_s("70B-class", L)),
                       seed=SEED, local=True)
    assert result.passed, result.message


def test_plan_layout_wrong_answer_breaks_the_memory_limit_by_how_much():
    wrong = _solution("nb08_plan_layout", wrong=True)["plan_layout"]
    result = run_check("nb08_plan_layout", wrong, seed=SEED, local=True)
    assert result.status == "failed" and "memory limit broken" in result.message
    assert "(4, 8, 2) needs 120.9 GiB per chip, 24.9 GiB over" in result.message


def test_plan_layout_lazy_data_parallel_default_breaks_the_memory_limit():
    result = run_check("nb08_plan_layout", _plan((64, 1, 1)), seed=SEED, local=True)
    assert result.status == "failed" and "memory limit broken" in result.message and "(64, 1, 1) needs" in result.message


def test_plan_layout_tp_across_servers_misses_the_step_target_and_names_the_all_reduces():
    result = run_check("nb08_plan_layout", _plan((1, 32, 2)), seed=SEED, local=True)
    assert result.status == "failed" and "step target missed" in result.message
    assert "(125%)" in result.message and "largest overhead is the tensor-parallel all-reduces" in result.message


def test_plan_layout_compute_only_prediction_is_told_the_terms_it_left_out():
    # the lazy prediction: the step is its compute, communication ignored
    from trnlab.distributed import scaling, topology

    machine, big = topology.get("Trn2 UltraServer"), scaling.MODELS["70B-class"]
    compute_s = 256 * big.flops_per_sequence() / (64 * machine.peak_flops() * scaling.UTILIZATION)
    result = run_check("nb08_plan_layout", _plan((2, 8, 4), lambda L: compute_s), seed=SEED, local=True)
    assert result.status == "failed" and "the prediction missed" in result.message and "(-8%)" in result.message
    assert "tensor-parallel all-reduces 1.39 s, pipeline bubble 0.51 s" in result.message


def test_plan_layout_refuses_a_layout_that_does_not_use_every_chip():
    result = run_check("nb08_plan_layout", _plan((2, 8, 2), lambda L: 20.0), seed=SEED, local=True)
    assert result.status == "failed" and "dp × tp × pp = 64" in result.message
