"""NKI 0.7's compiled loops with bounds known at trace time: nl.fori_loop, nl.while_loop,
nl.dynamic_range run their bodies as written; run-time (register) bounds are refused by name."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl

from nki_kernels.compiled_loops import column_block_sums_fori, every_other_block_dynamic, halvings_while


def test_fori_loop_body_accumulates_through_sbuf():
    x = np.random.default_rng(0).normal(size=(128, 4 * 512)).astype(np.float32)
    np.testing.assert_allclose(column_block_sums_fori(x), x.reshape(128, 4, 512).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_fori_loop_costs_its_iterations():
    one = nki.run(column_block_sums_fori, nki.ShapeDtype((128, 512), "float32"), timing_only=True)
    eight = nki.run(column_block_sums_fori, nki.ShapeDtype((128, 8 * 512), "float32"), timing_only=True)
    # the body's DMA and add once per iteration (nothing hoisted), around one memset and one store
    assert len(one.launch.timeline.records) == 2 + 2 * 1
    assert len(eight.launch.timeline.records) == 2 + 2 * 8
    start_up = one.core.spec.launch_ns     # paid once either way
    assert eight.latency_ns - start_up > 2 * (one.latency_ns - start_up)


def test_while_loop_runs_until_the_condition_is_zero():
    x = np.full((128, 64), 8.0, np.float32)
    np.testing.assert_array_equal(halvings_while(x, 3), np.full((128, 64), 1.0, np.float32))
    np.testing.assert_array_equal(halvings_while(x, 0), x)     # a true while: zero runs no body


def test_dynamic_range_steps_like_range():
    x = np.random.default_rng(1).normal(size=(128, 6 * 128)).astype(np.float32)
    out = every_other_block_dynamic(x)
    blocks = out.reshape(128, 6, 128)
    np.testing.assert_array_equal(blocks[:, ::2], x.reshape(128, 6, 128)[:, ::2])
    np.testing.assert_array_equal(blocks[:, 1::2], 0)


def test_loop_rules_are_named():
    with pytest.raises(nki.NKIError, match="step must be a compile-time positive integer"):
        nl.fori_loop(0, 4, lambda i: None, step=0)
    with pytest.raises(nki.NKIError, match="run-time bounds"):
        nl.fori_loop(0, object(), lambda i: None)
    seen = []
    nl.fori_loop(2, 9, seen.append, step=3)
    assert seen == [2, 5, 8]
