"""Mask clauses relating several iterators (`mask=(i_p >= i_f)`, `(i_p + i_f < n)`): the instruction
acts exactly on the elements where the predicate holds, as NKI's mask semantics says."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.nki import mask_split

from nki_kernels.masks import add_first_n, band_exp, band_exp_functional, lower_triangle_scaled


def test_causal_mask_touches_the_lower_triangle_only():
    x = np.random.default_rng(0).normal(size=(128, 96)).astype(np.float32)
    out = lower_triangle_scaled(x)
    lower = np.tril(np.ones((128, 96), bool))
    np.testing.assert_array_equal(out[lower], 2 * x[lower])
    np.testing.assert_array_equal(out[~lower], 0)


def test_a_causal_mask_is_computed_over_the_box_then_selected():
    # boxes of rows j..127 would start at partition j (start-partition rule): one instruction over
    # the whole tile into a scratch, then memset + affine_select (predicate) + select (merge)
    with pytest.raises(mask_split.PartitionStartRefused, match="start-partition rule"):
        i_p, i_f = nl.mgrid[0:128, 0:96]
        mask_split.boxes(i_p >= i_f)
    run = nki.run(lower_triangle_scaled, nki.ShapeDtype((128, 96), "float32"), timing_only=True)
    opcodes = [r[1] for r in run.core.timeline.records]
    assert opcodes.count("tensor_scalar") == 1 and opcodes.count("select") == 1
    assert opcodes.count("affine_select") == 1


@pytest.mark.parametrize("width", [1, 50, 130, 300])
def test_band_mask_combines_a_two_iterator_clause_with_a_one_iterator_clause(width):
    x = np.random.default_rng(1).normal(size=(128, 160)).astype(np.float32)
    i, j = np.mgrid[0:128, 0:160]
    where = (i + j < width) & (j < 100)
    out = band_exp(x, width)
    np.testing.assert_allclose(out[where], np.exp(x[where]), rtol=1e-6)
    np.testing.assert_array_equal(out[~where], x[~where])


@settings(max_examples=30, deadline=None)
@given(a=st.integers(-3, 3), b=st.integers(-3, 3), c=st.integers(-200, 200), op=st.sampled_from(["<", "<=", ">", ">="]))
def test_the_boxes_cover_exactly_the_predicate(a, b, c, op):
    i_p, i_f = nl.mgrid[0:40, 0:24]
    expr = a * i_p + b * i_f + c
    pred = {"<": expr < 0, "<=": expr <= 0, ">": expr > 0, ">=": expr >= 0}[op]
    if not mask_split.has_multi_iterator_clause(pred):
        return                                            # a or b zero: an ordinary box mask
    covered = np.zeros((40, 24), int)
    from trnlab.nki.indexing import restrict
    for box in mask_split.boxes(pred, partition_rule=False):
        r = restrict(box)
        (plo, phi), (flo, fhi) = r.get(i_p.terms[0][0], (0, 40)), r.get(i_f.terms[0][0], (0, 24))
        covered[plo:phi, flo:fhi] += 1
    i, j = np.mgrid[0:40, 0:24]
    value = a * i + b * j + c
    truth = {"<": value < 0, "<=": value <= 0, ">": value > 0, ">=": value >= 0}[op]
    np.testing.assert_array_equal(covered, truth.astype(int))


@pytest.mark.parametrize("n", [256 * 512, 256 * 512 - 700, 130 * 512 + 1, 5])
def test_a_flat_offset_mask_on_load_math_and_store(n):
    rng = np.random.default_rng(2)
    a, b = (rng.normal(size=(256, 512)).astype(np.float32) for _ in range(2))
    out = add_first_n(a, b, n).reshape(-1)
    np.testing.assert_array_equal(out[:n], (a + b).reshape(-1)[:n])
    np.testing.assert_array_equal(out[n:], 0)


def test_functional_style_results_are_written_by_every_box():
    out = band_exp_functional(np.ones((128, 64), np.float32), 40)
    i, j = np.mgrid[0:128, 0:64]
    np.testing.assert_allclose(out[i + j < 40], np.e, rtol=1e-6)
    np.testing.assert_array_equal(out[i + j >= 40], 1.0)


def test_functional_style_needing_the_select_fallback_is_refused_by_name():
    from nki_kernels.masks import causal_exp_functional
    with pytest.raises(nki.MaskError, match="destination style"):
        causal_exp_functional(np.ones((128, 64), np.float32))


def test_a_band_mask_costs_one_instruction_per_distinct_row_count():
    run = nki.run(band_exp, nki.ShapeDtype((128, 160), "float32"), 130, timing_only=True)
    exps = [r for r in run.core.timeline.records if r[1] == "activation"]
    # columns j < 100 with rows i < 130 - j: 3 columns keep all 128 rows (one box), then one per column
    assert len(exps) == 1 + (100 - 3)
