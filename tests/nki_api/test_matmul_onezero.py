"""nc_matmul's one/zero hints (is_stationary_onezero / is_moving_onezero, trnlab/hardware/onezero.py): the
result is the ordinary matmul; a float32 operand hinted streams in half the passes ("could lead to 2x better
performance if stationary tile is in float32; the field has no impact for non-float32", nki.isa.nc_matmul);
a hint on a float32 operand that holds another value is refused in full mode; the hints travel through the
traced program (both schedule backends, loop stamping, a program saved and loaded)."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import cost, presets
from trnlab.hardware.errors import OneZeroHintError
from trnlab.hardware.program import Program

from nki_isa_helpers import hbm_copy, run_both, sbuf_copy

BF16 = ml_dtypes.bfloat16


def _hinted_matmul(stationary_onezero: bool, moving_onezero: bool, repeats: int = 1):
    @nki.jit
    def hinted_matmul(lhsT, rhs):
        """out[M, N] = lhsT.T @ rhs, `repeats` times into fresh PSUM tiles (the last one kept)."""
        M, N = lhsT.shape[1], rhs.shape[1]
        a, b = sbuf_copy(lhsT), sbuf_copy(rhs)
        result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        for _ in nl.affine_range(repeats):
            acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc, stationary=a, moving=b, is_stationary_onezero=stationary_onezero,
                           is_moving_onezero=moving_onezero)
            nisa.tensor_copy(dst=result, src=acc)
        return hbm_copy(result)

    return hinted_matmul


def _matmul_ns(run) -> list:
    return [r.end_ns - r.start_ns for r in (run.timeline[i] for i in range(len(run.timeline)))
            if r.opcode == "nc_matmul"]


# -- values --------------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(K=st.integers(1, 128), M=st.integers(1, 128), N=st.integers(1, 512), seed=st.integers(0, 2**16),
       hints=st.sampled_from([(True, False), (False, True), (True, True)]))
def test_a_true_hint_leaves_the_product_unchanged(K, M, N, seed, hints):
    rng = np.random.default_rng(seed)
    lhsT = rng.normal(size=(K, M)).astype(np.float32)
    rhs = rng.normal(size=(K, N)).astype(np.float32)
    if hints[0]:
        lhsT = rng.integers(0, 2, size=(K, M)).astype(np.float32)
    if hints[1]:
        rhs = rng.integers(0, 2, size=(K, N)).astype(np.float32)
    run = run_both(_hinted_matmul(*hints), lhsT, rhs)
    plain = nki.run(_hinted_matmul(False, False), lhsT, rhs)
    np.testing.assert_array_equal(run.outputs, plain.outputs)
    np.testing.assert_allclose(run.outputs, lhsT.T.astype(np.float64) @ rhs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("which", ["stationary", "moving"])
def test_a_false_hint_on_a_float32_operand_is_refused_in_full_mode(fast, which):
    ones = np.ones((32, 16), np.float32)
    bad = ones.copy()
    bad[3, 5] = 0.5
    lhsT, rhs = (bad, ones) if which == "stationary" else (ones, bad)
    with config.override(fast=fast):
        with pytest.raises(OneZeroHintError, match=rf"is_{which}_onezero=True.*0\.5 at \(3, 5\)"):
            nki.run(_hinted_matmul(which == "stationary", which == "moving"), lhsT, rhs)


def test_a_nan_breaks_the_hint_and_minus_zero_keeps_it():
    ones = np.ones((16, 8), np.float32)
    signed = ones.copy()
    signed[0, 0] = -0.0
    nki.run(_hinted_matmul(True, False), signed, ones)
    signed[1, 1] = np.nan
    with pytest.raises(OneZeroHintError, match="nan"):
        nki.run(_hinted_matmul(True, False), signed, ones)


def test_timing_mode_cannot_check_the_values_and_costs_the_hint():
    sd = nki.ShapeDtype
    run = nki.run(_hinted_matmul(True, False), sd((128, 128), "float32"), sd((128, 512), "float32"),
                  timing_only=True)
    assert _matmul_ns(run) == _matmul_ns(nki.run(_hinted_matmul(True, False), np.ones((128, 128), np.float32),
                                                 np.ones((128, 512), np.float32)))


def test_a_hint_on_a_bf16_operand_neither_checks_nor_saves():
    """"the field has no impact for non-float32 stationary": a bf16 operand holding other values is the
    ordinary matmul, at the ordinary cost."""
    rng = np.random.default_rng(7)
    lhsT = rng.normal(size=(64, 32)).astype(BF16)
    rhs = rng.normal(size=(64, 256)).astype(BF16)
    hinted = run_both(_hinted_matmul(True, True), lhsT, rhs)
    plain = nki.run(_hinted_matmul(False, False), lhsT, rhs)
    np.testing.assert_array_equal(hinted.outputs, plain.outputs)
    assert _matmul_ns(hinted) == _matmul_ns(plain)


# -- cost ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_each_hint_on_a_float32_operand_halves_the_passes(target):
    ones_st, ones_mv = np.ones((128, 128), np.float32), np.ones((128, 512), np.float32)
    ns = {hints: _matmul_ns(run_both(_hinted_matmul(*hints), ones_st, ones_mv, target=target))[0]
          for hints in [(False, False), (True, False), (False, True), (True, True)]}
    bf16 = _matmul_ns(nki.run(_hinted_matmul(False, False), ones_st.astype(BF16), ones_mv.astype(BF16),
                              target=target))[0]
    assert ns[(False, False)] == pytest.approx(4 * bf16)          # "4 * max(min(64, N_stationary), N_moving)"
    assert ns[(True, False)] == pytest.approx(2 * bf16) == ns[(False, True)]   # "2x better performance"
    assert ns[(True, True)] == pytest.approx(bf16)                # both: ASSUMED halved twice


@given(N=st.integers(1, 512), M=st.integers(1, 128), K=st.integers(1, 128),
       st_dtype=st.sampled_from(["float32", "bfloat16"]), mv_dtype=st.sampled_from(["float32", "bfloat16"]),
       hints=st.tuples(st.booleans(), st.booleans()))
def test_the_cost_model_divides_the_fp32_passes_by_two_per_hinted_fp32_operand(N, M, K, st_dtype, mv_dtype,
                                                                                hints):
    spec = presets.TRN2.core

    def operand(shape, dtype):
        return cost.Operand("sbuf", shape, dtype, shape[0], shape[1], shape[0] * shape[1] * 4)

    attrs = {name: True for name, flag in zip(("is_stationary_onezero", "is_moving_onezero"), hints) if flag}
    c = cost.cost(cost.Instruction("nc_matmul", "pe", (operand((K, M), st_dtype), operand((K, N), mv_dtype)),
                                   (operand((M, N), "float32"),), attrs), spec)
    fp32 = "float32" in (st_dtype, mv_dtype)
    halvings = sum(flag and dtype == "float32" for flag, dtype in zip(hints, (st_dtype, mv_dtype)))
    passes = spec.fp32_matmul_factor // 2 ** halvings if fp32 else 1
    assert c.cycles == max(min(spec.matmul_min_cycles, M), N) * passes
    assert c.latency_cycles == c.cycles + (K - 1) + (M - 1)


# -- the hints travel through the program ----------------------------------------------------------
def test_the_hints_are_recorded_only_when_set_and_survive_save_and_load(tmp_path):
    sd = nki.ShapeDtype
    args = (sd((128, 128), "float32"), sd((128, 512), "float32"))
    plain = nki.trace(_hinted_matmul(False, False), *args)
    hinted = nki.trace(_hinted_matmul(True, False), *args)
    assert [i.attrs for i in plain.instructions if i.opcode == "nc_matmul"] == [{"accumulate": None}]
    assert [i.attrs for i in hinted.instructions if i.opcode == "nc_matmul"] == \
        [{"accumulate": None, "is_stationary_onezero": True}]
    hinted.save(tmp_path / "hinted.json")
    loaded = Program.load(tmp_path / "hinted.json")
    from trnlab.hardware.device import Device
    a, b = (Device("trn2", mode="timing", cores=1).run(p, None, None).core.timeline for p in (hinted, loaded))
    assert [tuple(r) for r in a.records] == [tuple(r) for r in b.records]


def test_a_stamped_loop_of_hinted_matmuls_keeps_every_hint_and_its_cost():
    """Loop stamping (trnlab/nki/loops.py) rebuilds iterations 2..n-2 from iterations 0, 1 and n-1: the
    stamped program is the concrete trace's, hints included, and every matmul costs the hinted figure."""
    from trnlab.nki import loops
    ones_st, ones_mv = np.ones((128, 128), np.float32), np.ones((128, 512), np.float32)
    stamped_loops = [0]
    original = loops.Loop.after_second

    def counting(self):
        original(self)
        stamped_loops[0] += 1
    programs = {}
    for stamp in (True, False):
        nki._PROGRAMS.clear()
        loops.Loop.after_second = counting
        try:
            with config.override(fast=stamp):
                programs[stamp] = nki.trace(_hinted_matmul(False, True, repeats=6), ones_st, ones_mv)
        finally:
            loops.Loop.after_second = original
    nki._PROGRAMS.clear()
    assert stamped_loops[0] >= 1
    assert loops.first_difference(programs[True], programs[False]) == ""
    matmuls = [i for i in programs[True].instructions if i.opcode == "nc_matmul"]
    assert len(matmuls) == 6 and all(i.attrs.get("is_moving_onezero") is True for i in matmuls)
    run = run_both(_hinted_matmul(False, True, repeats=6), ones_st, ones_mv)
    plain = _matmul_ns(nki.run(_hinted_matmul(False, False), ones_st, ones_mv))[0]
    assert _matmul_ns(run) == pytest.approx([plain / 2] * 6)


@nki.jit
def words_as_ones(words, rhs):
    """lhsT.T @ rhs with lhsT the uint32 words [K, M] read as fp32 (tile.view), hinted 0/1."""
    acc = nl.ndarray((words.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=sbuf_copy(words).view(nl.float32), moving=sbuf_copy(rhs),
                   is_stationary_onezero=True)
    result = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    return hbm_copy(result)


def test_a_retyped_stationary_is_hinted_and_checked_as_the_type_it_is_read_as():
    """uint32 words holding the bits of 0.0f and 1.0f, read as fp32: a true hint, costed as an fp32 one; the
    word 2 (a denormal fp32, not 0 or 1) breaks it."""
    rng = np.random.default_rng(11)
    ones = rng.integers(0, 2, size=(64, 32)).astype(np.float32)
    rhs = rng.normal(size=(64, 128)).astype(np.float32)
    run = run_both(words_as_ones, ones.view(np.uint32), rhs)
    np.testing.assert_allclose(run.outputs, ones.T @ rhs, rtol=1e-5, atol=1e-5)
    plain = nki.run(_hinted_matmul(False, False), ones, rhs)
    assert _matmul_ns(run) == pytest.approx([_matmul_ns(plain)[0] / 2])
    words = ones.view(np.uint32).copy()
    words[0, 0] = 2
    with pytest.raises(OneZeroHintError, match="is_stationary_onezero=True"):
        nki.run(words_as_ones, words, rhs)


def _transpose(hint: bool):
    @nki.jit
    def transpose(x):
        """x.T through the PE array (is_transpose=True), hinted or not."""
        P, F = x.shape
        acc = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=sbuf_copy(x), moving=sbuf_copy(x)[:, 0:P], is_transpose=True,
                       is_moving_onezero=hint)
        result = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=acc)
        return hbm_copy(result)

    return transpose


def test_the_hints_change_nothing_in_a_transposing_matmul(records):
    x = np.random.default_rng(4).normal(size=(64, 96)).astype(np.float32)
    hinted, plain = run_both(_transpose(True), x), nki.run(_transpose(False), x)
    np.testing.assert_array_equal(hinted.outputs, x.T)
    assert records(hinted) == records(plain)
