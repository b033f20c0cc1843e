"""The articles' claims examined: the ratios from the published figures and what makes each claim true."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.economics import claims, figures

SYSTEMS = figures.default_systems()


def test_trn1_cost_claim_at_2022_prices_needs_slightly_better_utilisation():
    check = claims.examine(claims.CLAIMS_BY_ID["trn1_cost"])
    by_hand = (21.50 / (16 * 190e12)) / (32.77 / (8 * 312e12))
    assert math.isclose(check.at_equal_mfu, by_hand, rel_tol=1e-12)      # 0.54: 46 % cheaper at equal MFU
    assert not check.supported_at_equal_mfu
    assert math.isclose(check.required_mfu_ratio, by_hand / 0.5, rel_tol=1e-12)


def test_the_same_claim_against_todays_gpu_price_needs_much_more():
    now = claims.examine(claims.CLAIMS_BY_ID["trn1_cost"], baseline="p4d.24xlarge")
    then = claims.examine(claims.CLAIMS_BY_ID["trn1_cost"])
    assert now.required_mfu_ratio > then.required_mfu_ratio * 1.4


def test_trn3_compute_claim_is_chip_count_times_8bit_peak():
    check = claims.examine(claims.CLAIMS_BY_ID["trn3_launch_compute"])
    assert math.isclose(check.at_equal_mfu, (144 * 2517) / (64 * 1299), rel_tol=1e-12)
    assert check.supported_at_equal_mfu                               # 4.36 against "4.4×"
    bf16 = claims.peak_ratio(SYSTEMS["Trn3 UltraServer (Gen2)"], SYSTEMS["Trn2 UltraServer"], "bf16")
    assert 2.2 < bf16 < 2.3                                            # in bf16 it is the chip count only
    gen1 = claims.examine(claims.CLAIMS_BY_ID["trn3_ultraserver_performance"], subject="Trn3 UltraServer (Gen1)")
    assert not gen1.supported_at_equal_mfu


def test_efficiency_claims_do_not_follow_from_peaks_and_estimated_power():
    for claim_id in ("trn3_preview_efficiency", "trn3_launch_efficiency"):
        check = claims.examine(claims.CLAIMS_BY_ID[claim_id])
        assert not check.supported_at_equal_mfu
        assert math.isclose(check.at_equal_mfu, (2517 / 1000) / (1299 / 500), rel_tol=1e-12)


def test_efficiency_does_not_depend_on_chip_count():
    a = claims.efficiency_ratio(SYSTEMS["Trn3 UltraServer (Gen1)"], SYSTEMS["trn2.48xlarge"], dtype="fp8")
    b = claims.efficiency_ratio(SYSTEMS["Trn3 UltraServer (Gen2)"], SYSTEMS["Trn2 UltraServer"], dtype="fp8")
    assert math.isclose(a, b, rel_tol=1e-12)


names = st.sampled_from(sorted(SYSTEMS))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(names, names, st.floats(min_value=0.0, max_value=0.9), st.floats(min_value=0.05, max_value=1.0))
def test_mfu_for_saving_gives_exactly_the_saving(a, b, saving, mfu_b):
    need = claims.mfu_for_saving(SYSTEMS[a], SYSTEMS[b], saving, mfu_b)
    assert math.isclose(claims.cost_ratio(SYSTEMS[a], SYSTEMS[b], need, mfu_b), 1 - saving, rel_tol=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(names, names, st.floats(min_value=0.05, max_value=1.0), st.floats(min_value=0.05, max_value=1.0))
def test_cost_ratio_is_antisymmetric(a, b, ma, mb):
    r = claims.cost_ratio(SYSTEMS[a], SYSTEMS[b], ma, mb) * claims.cost_ratio(SYSTEMS[b], SYSTEMS[a], mb, ma)
    assert math.isclose(r, 1.0, rel_tol=1e-12)


def test_every_claim_has_a_source_and_a_printable_summary():
    for check in claims.examine_all():
        text = check.summary()
        assert check.claim.source in text and check.claim.date in text and check.conditions
