"""Notebook 07's "predict, then measure" exercise: AdamW's updates placed inside the backward of the
compiled training step (notebook 07's one-block GPT, and two blocks), replayed on the simulated trn2
and held to a target stated up front (the updates add at most 120 % of the reference placement's time
to the forward and backward), with a predicted step time within 5 %. The verdicts of a wrong, a lazy and a reasoned-but-different answer,
and feedback that names the choice that broke the target. The step is compiled and each placement
replayed once per process (the checker memoises them), so the module takes seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnlab.course.checks import nb07_training as nb07
from trnlab.course.exercises import run_check
from trnlab.course.solve import SOLUTIONS_DIR

SEED = 3
ID = "nb07_overlap_optimizer"


def _solution(wrong: bool = False):
    namespace: dict = {}
    exec(Path(SOLUTIONS_DIR, f"{ID}{'.wrong' if wrong else ''}.py").read_text(), namespace)
    return namespace["place_updates"]


def _ready(backward) -> dict:
    ready = {}
    for region, params in backward:
        for name in params:
            ready[name] = region          # the last call that writes the gradient
    return ready


def _delayed(calls_later: int, predict=None):
    """Each update `calls_later` backward calls after its gradient is finished; the prediction of the
    reference solution (forward + backward, the updates after the last call at the default tail's
    average, half that for one inside the backward), or `predict(default)`."""
    def place_updates(backward, default):
        regions = [region for region, _ in backward]
        placement = {n: regions[min(regions.index(r) + calls_later, len(regions) - 1)] for n, r in _ready(backward).items()}
        if predict is not None:
            return {"placement": placement, "predicted_us": predict(default)}
        after_end = sum(r == regions[-1] for r in placement.values())
        inside = len(placement) - after_end
        per_update = default["optimizer_us"] / len(placement)
        predicted = default["forward_us"] + default["backward_us"] + per_update * (after_end + inside / 2)
        return {"placement": placement, "predicted_us": predicted}

    return place_updates


def _overhead_us(n_layer: int, placement: dict) -> float:
    """What the updates add to the step when placed so (the check's own measurement)."""
    return nb07.measure_placement("trn2", n_layer, placement).total_us - nb07.forward_backward_us("trn2", n_layer)


def _reference_overhead_us(n_layer: int = 1) -> float:
    return _overhead_us(n_layer, nb07.reference_placement("trn2", n_layer))


def test_overlap_reference_is_the_best_delay_and_beats_the_default_and_the_hint():
    # on each case the updates inside the backward pay: the fastest delay adds at most 80 % of the
    # default tail, and directly behind the gradient's call (delay 0) or all at the end misses 120 %
    for n_layer in (1, 2):
        best = _reference_overhead_us(n_layer)
        default = _overhead_us(n_layer, nb07.delayed_placement("trn2", n_layer, 10_000))
        assert best == min(_overhead_us(n_layer, nb07.delayed_placement("trn2", n_layer, j)) for j in range(1, 7))
        assert best < 0.8 * default
        assert _overhead_us(n_layer, nb07.delayed_placement("trn2", n_layer, 0)) > nb07.OVERHEAD_TARGET * best


def test_overlap_reference_solution_passes():
    result = run_check(ID, _solution(), seed=SEED, local=True)
    assert result.passed, result.message


def test_overlap_two_calls_later_is_reasoned_but_different_and_passes():
    # two backward calls after the gradient instead of one: slower than the best delay, within 120 %
    result = run_check(ID, _delayed(2), seed=SEED, local=True)
    assert result.passed, result.message


def test_overlap_wrong_answer_updates_the_tied_token_table_before_its_gradient_is_finished():
    result = run_check(ID, _solution(wrong=True), seed=SEED, local=True)
    assert result.status == "failed" and "update before its gradient" in result.message
    assert "wte.weight's AdamW is placed after backward/matmul.0" in result.message
    assert "backward/embedding_backward.1 (35 backward calls later) still writes its gradient" in result.message


def test_overlap_copying_the_hint_misses_the_target_and_names_the_queue():
    # "each update as soon as its gradient is ready", read as: directly behind the call that finishes it
    def place_updates(backward, default):
        return {"placement": _ready(backward), "predicted_us": default["forward_us"] + default["backward_us"]}

    result = run_check(ID, place_updates, seed=SEED, local=True)
    assert result.status == "failed" and "overlap target missed" in result.message
    step_us = nb07.measure_placement("trn2", 1, nb07.delayed_placement("trn2", 1, 0)).total_us
    assert f"at most 120% of the reference's {_reference_overhead_us():.1f} µs" in result.message
    assert f"your step takes {step_us:.1f} µs" in result.message
    assert "15 of your 16 updates sit directly behind the call that finishes their gradient" in result.message
    assert "the backward — the step's critical path — waits behind it" in result.message


def test_overlap_no_overlap_misses_the_target_and_says_the_updates_wait_for_the_last_call():
    def place_updates(backward, default):
        return {"placement": {n: backward[-1][0] for n in _ready(backward)}, "predicted_us": sum(default.values())}

    result = run_check(ID, place_updates, seed=SEED, local=True)
    ratio = _overhead_us(1, nb07.delayed_placement("trn2", 1, 10_000)) / _reference_overhead_us()
    assert result.status == "failed" and "overlap target missed" in result.message and f"({ratio:.0%})" in result.message
    assert "15 of your 16 updates still wait for the backward's last call (backward/embedding_backward.1)" in result.message


def test_overlap_updates_issued_too_late_bunch_up_after_the_backward():
    result = run_check(ID, _delayed(16), seed=SEED, local=True)
    ratio = _overhead_us(1, nb07.delayed_placement("trn2", 1, 16)) / _reference_overhead_us()
    assert result.status == "failed" and "overlap target missed" in result.message and f"({ratio:.0%})" in result.message
    assert "10 of your 16 updates are issued more than 3 calls after their gradient" in result.message


def test_overlap_prediction_that_hides_every_update_misses_and_is_told_they_are_not_free():
    # the lazy prediction: the step is its forward and backward, the updates fully hidden
    result = run_check(ID, _delayed(1, lambda default: default["forward_us"] + default["backward_us"]),
                       seed=SEED, local=True)
    assert result.status == "failed" and "the prediction missed" in result.message
    default = nb07.default_phases_us("trn2", 1)
    predicted = default["forward_us"] + default["backward_us"]
    step_us = nb07.measure_placement("trn2", 1, nb07.delayed_placement("trn2", 1, 1)).total_us
    assert f"you predicted {predicted:.1f} µs ({predicted / step_us - 1:+.0%})" in result.message
    assert f"measured {step_us:.1f} µs" in result.message and predicted / step_us - 1 < -0.05
    assert "an update inside the backward is not free" in result.message


def test_overlap_refuses_a_region_that_is_no_backward_call():
    def place_updates(backward, default):
        return {"placement": {n: "forward/matmul.0" for n in _ready(backward)}, "predicted_us": 330.0}

    result = run_check(ID, place_updates, seed=SEED, local=True)
    assert result.status == "failed" and "'forward/matmul.0' is not a backward kernel call" in result.message


# -- nb07_step_flops: the hint names the term that is off ---------------------------------------------


def _flops(L, C, V, B, T):
    return 6 * (L * 12 * C * C + V * C) * B * T + 12 * L * B * T * T * C


def test_step_flops_backward_counted_once_is_told_it_does_twice_the_forward():
    result = run_check("nb07_step_flops", lambda L, C, V, B, T: 2 * _flops(L, C, V, B, T) / 3, seed=SEED, local=True)
    assert result.status == "failed" and "twice the forward's matmul work" in result.message


def test_step_flops_with_the_optimizer_counted_in_is_told_adamw_is_not_matmul_flops():
    def with_adamw(L, C, V, B, T):     # 12 element-wise FLOPs per matmul weight for the AdamW update
        return _flops(L, C, V, B, T) + 12 * (L * 12 * C * C + V * C)

    result = run_check("nb07_step_flops", with_adamw, seed=SEED, local=True)
    assert result.status == "failed" and "12 FLOPs per matmul weight more than 6·N·tokens plus attention" in result.message
    assert "the AdamW update is element-wise work on the Vector engine, not matmul FLOPs" in result.message
