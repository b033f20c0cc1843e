"""Notebook 06's "predict, then measure" exercise: the rows per compiled call of an MLP, measured on the
simulated Trn2 and held to a latency budget, 120 % of the reference's time per row, and a prediction
within 25 % — the verdicts of the reference, a reasoned-but-different answer, lazy answers and a wrong
one, each failure naming the limit broken, by how much, and the choice that broke it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnlab.course.checks.nb06_batch import measure_call
from trnlab.course.exercises import run_check
from trnlab.course.solve import SOLUTIONS_DIR
from trnlab.hardware import presets

SEED = 3                      # its drawn budget, 63.1 µs, sits in the first stripe's range
GRADE_ID = "nb06_rows_per_call"
SPEC = presets.core_spec("trn2")


def _solution(wrong: bool = False) -> dict:
    namespace: dict = {}
    exec(Path(SOLUTIONS_DIR, f"{GRADE_ID}{'.wrong' if wrong else ''}.py").read_text(), namespace)
    return namespace


@pytest.fixture(scope="module")
def reference() -> dict:
    return _solution()       # compiled once: its measurements are shared by the tests below


def _check(answer):
    return run_check(GRADE_ID, answer, seed=SEED, local=True)


def test_reference_predicts_then_measures_and_passes(reference):
    result = _check(reference["plan_batch"])
    assert result.passed, result.message


def test_reasoned_but_different_no_overlap_model_passes(reference):
    # another model: compute and memory one after the other (no overlap), no fixed costs; whole stripes.
    # It overestimates (never breaks a budget) and picks 384 rows instead of 512 for 150 µs: 107 % per row
    def additive_us(b):
        return 4 * b * 1024 * 1024 / SPEC.peak_flops("float32") * 1e6 + \
            (8 * 1024 * 1024 + 8 * 1024 + 16 * 1024 * b) / SPEC.hbm_bandwidth * 1e6

    def plan_batch(budget_us):
        batch = max(b for b in range(128, 1025, 128) if additive_us(b) <= budget_us)
        return {"batch": batch, "predicted_us": additive_us(batch)}

    result = _check(plan_batch)
    assert result.passed, result.message


def test_wrong_roofline_only_choice_breaks_the_budget_and_names_the_stripes():
    result = _check(_solution(wrong=True)["plan_batch"])
    assert result.status == "failed" and "latency budget 60 µs broken" in result.message
    call = measure_call(281)
    assert f"batch 281 takes {call.us:.1f} µs, {call.us / 60 - 1:.0%} over" in result.message
    assert "so compute-bound" in result.message
    assert "281 rows run as 3 stripes of 128 (the tiling pass's m), the last only 25/128 full" in result.message


def test_lazy_copy_of_the_hint_largest_batch_breaks_the_budget_on_compute():
    # "a larger batch moves the points toward the compute roof": the largest batch, predicted at the roof
    result = _check(lambda budget: {"batch": 1024, "predicted_us": 218.5})
    assert result.status == "failed" and "latency budget 60 µs broken" in result.message
    call = measure_call(1024)
    assert f"batch 1024 takes {call.us:.1f} µs, {call.us / 60 - 1:.0%} over: compute floor 218.5 µs" in result.message
    assert "so compute-bound" in result.message


def test_lazy_one_row_as_measured_in_the_notebook_misses_the_throughput_target():
    one, best = measure_call(1), measure_call(128)
    result = _check(lambda budget: {"batch": 1, "predicted_us": one.us})
    assert result.status == "failed" and "throughput target missed" in result.message
    assert f"reference's {best.us_per_row:.3f} µs per row (batch 128, {best.us:.1f} µs)" in result.message
    assert f"({one.us_per_row / best.us_per_row:.0%})" in result.message
    assert "every call reads all 8.4 MB of weights (23.2 µs at HBM bandwidth)" in result.message
    assert "1 row fills only 1/128 of a 128-row stripe (the tiling pass's m) and pays for a full one" in result.message


def test_a_partial_stripe_misses_the_throughput_target_and_says_so(reference):
    answer = lambda budget: {"batch": 192, "predicted_us": 78.0} if budget == 90.0 \
        else reference["plan_batch"](budget)  # noqa: E731
    result = _check(answer)
    assert result.status == "failed" and "latency budget 90 µs: throughput target missed" in result.message
    ratio = measure_call(192).us_per_row / measure_call(256).us_per_row
    assert 1.2 < ratio < 1.4 and f"({ratio:.0%})" in result.message and "the last only 64/128 full" in result.message


def test_lazy_compute_only_prediction_is_told_it_is_below_the_memory_floor(reference):
    # the reference's batches, each predicted as its FLOPs at the fp32 peak
    def plan_batch(budget_us):
        batch = reference["plan_batch"](budget_us)["batch"]
        return {"batch": batch, "predicted_us": 4 * batch * 1024 * 1024 / SPEC.peak_flops("float32") * 1e6}

    result = _check(plan_batch)
    assert result.status == "failed" and "batch 128 meets the targets, but the prediction missed" in result.message
    call = measure_call(128)
    assert f"the measured {call.us:.1f} µs, you predicted 27.3 µs ({27.3 / call.us - 1:+.0%})" in result.message
    assert "memory floor 28.9 µs" in result.message and "so memory-bound" in result.message
    assert "below the roofline floor: the call cannot beat its bytes at HBM bandwidth" in result.message


def test_a_roofline_prediction_without_fixed_costs_is_told_what_it_left_out(reference):
    def plan_batch(budget_us):
        batch = reference["plan_batch"](budget_us)["batch"]
        return {"batch": batch, "predicted_us": reference["floor_us"](batch)}

    result = _check(plan_batch)
    call = measure_call(128)
    assert result.status == "failed" and f"({call.floor_us / call.us - 1:+.0%})" in result.message
    assert f"fixed costs {call.us - call.floor_us:.1f} µs on top" in result.message
    assert "leaves out the fixed costs a call pays whatever its size" in result.message


def test_a_batch_beyond_the_largest_compiled_is_refused():
    result = _check(lambda budget: {"batch": 4096, "predicted_us": 900.0})
    assert result.status == "failed" and "expected 1 to 1024 rows per call, got 4096" in result.message
