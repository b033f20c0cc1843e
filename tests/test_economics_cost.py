"""The cost and energy calculator: 6·N·D, time, dollars and energy scale the way the formulas say."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.economics import cost, figures

SYSTEMS = figures.default_systems()
NAMES = sorted(SYSTEMS)
flops_st = st.floats(min_value=1e12, max_value=1e26)
mfu_st = st.floats(min_value=0.01, max_value=1.0)


def test_training_flops_is_six_n_d():
    assert cost.training_flops(124e6, 2.5e9) == 6 * 124e6 * 2.5e9
    with pytest.raises(ValueError, match="must be >= 0"):
        cost.training_flops(-1, 10)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(flops_st, st.floats(min_value=1.0, max_value=1e3), mfu_st, st.sampled_from(NAMES))
def test_cost_time_and_energy_scale_linearly_with_flops(flops, factor, mfu, name):
    one = cost.estimate(flops, SYSTEMS[name], mfu)
    more = cost.estimate(flops * factor, SYSTEMS[name], mfu)
    for a, b in [(one.seconds, more.seconds), (one.usd, more.usd), (one.kwh, more.kwh)]:
        assert math.isclose(b, a * factor, rel_tol=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(flops_st, mfu_st, st.floats(min_value=0.01, max_value=1.0), st.sampled_from(NAMES))
def test_time_is_inversely_proportional_to_mfu(flops, m1, m2, name):
    a, b = cost.estimate(flops, SYSTEMS[name], m1), cost.estimate(flops, SYSTEMS[name], m2)
    assert math.isclose(a.seconds * m1, b.seconds * m2, rel_tol=1e-9)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(flops_st, mfu_st, st.integers(min_value=1, max_value=4096), st.sampled_from(NAMES))
def test_more_instances_shorten_the_time_but_cost_the_same_with_perfect_scaling(flops, mfu, n, name):
    one, many = cost.estimate(flops, SYSTEMS[name], mfu), cost.estimate(flops, SYSTEMS[name], mfu, instances=n)
    assert math.isclose(many.seconds * n, one.seconds, rel_tol=1e-9)
    assert math.isclose(many.usd, one.usd, rel_tol=1e-9) and math.isclose(many.kwh, one.kwh, rel_tol=1e-9)
    assert many.chips == n * SYSTEMS[name].chips


def test_estimate_by_hand_for_gpt2_small_on_trn2():
    system = SYSTEMS["trn2.48xlarge"]
    e = cost.estimate(cost.training_flops(124e6, 2.5e9), system, 0.4)
    seconds = 6 * 124e6 * 2.5e9 / (16 * 667e12 * 0.4)
    assert math.isclose(e.seconds, seconds, rel_tol=1e-12)
    assert math.isclose(e.usd, seconds / 3600 * 35.76, rel_tol=1e-12)
    assert math.isclose(e.kwh, seconds / 3600 * 16 * 500 / 1000, rel_tol=1e-12)   # 500 W per chip estimate


def test_energy_is_power_times_time_times_overhead():
    system = SYSTEMS["p5.48xlarge"]
    e = cost.estimate(1e21, system, 0.5, overhead=1.3)
    assert math.isclose(e.kwh, e.hours * 8 * 700 * 1.3 / 1000, rel_tol=1e-12)


def test_editing_a_price_changes_only_that_systems_dollars():
    systems = figures.default_systems()
    before = cost.estimate(1e20, systems["trn1.32xlarge"]).usd
    systems["trn1.32xlarge"].price.value /= 2
    assert math.isclose(cost.estimate(1e20, systems["trn1.32xlarge"]).usd, before / 2)
    assert figures.default_systems()["trn1.32xlarge"].price.value == 21.50   # defaults are fresh copies


def test_mfu_outside_zero_one_is_an_error_naming_the_rule():
    with pytest.raises(ValueError, match=r"MFU must be in \(0, 1\]"):
        cost.estimate(1e20, SYSTEMS["trn1.32xlarge"], 1.5)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(flops_st, st.floats(min_value=0.01, max_value=1e3), mfu_st, st.sampled_from(NAMES))
def test_instances_for_deadline_is_the_fewest_that_finish_in_time(flops, days, mfu, name):
    n = cost.instances_for_deadline(flops, SYSTEMS[name], days, mfu)
    assert cost.estimate(flops, SYSTEMS[name], mfu, instances=n).days <= days * (1 + 1e-9)
    if n > 1:
        assert cost.estimate(flops, SYSTEMS[name], mfu, instances=n - 1).days > days


def test_compare_ranks_cheapest_first_and_skips_systems_without_the_precision():
    ranked = cost.compare(1e21, SYSTEMS, dtype="fp8")
    assert [e.usd for e in ranked] == sorted(e.usd for e in ranked)
    assert not any(e.system.startswith("p4d") for e in ranked)   # A100 has no fp8


def test_every_price_and_power_figure_says_where_it_comes_from():
    for row in figures.sources_table():
        assert row["status"] in figures.STATUSES and row["source"]
        if row["status"] == figures.ASSUMED:
            assert "ASSUMED" in row["source"]


def test_trainium_peaks_come_from_the_presets():
    acc = figures.default_accelerators()
    from trnlab.hardware import presets
    assert acc["trn2"].peak("bf16") == presets.TRN2.quoted_tflops["bfloat16"] * 1e12
    assert acc["trn3"].peak("fp8") == presets.TRN3.quoted_tflops["mxfp8"] * 1e12
    assert acc["trn1"].peak("fp8") == acc["trn1"].peak("bf16")      # v2 runs fp8 at the bf16 rate
    assert acc["trn2"].hbm_bandwidth == presets.TRN2.hbm_bandwidth
    assert SYSTEMS["Trn3 UltraServer (Gen2)"].chips == presets.TRN3_ULTRASERVER_GEN2.chips
    with pytest.raises(ValueError, match="has no fp8 peak"):
        acc["a100"].peak("fp8")
