"""NKI 0.7's random number instructions (nisa.rng, rand2, rand_get_state, rand_set_state, set_rng_seed):
values against an independent XORWOW written here, the state's layout and round trip, the rules AWS's
pages state (named errors), both call styles, and the same values and timeline with TRNLAB_FAST=0."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import DtypeError, EngineError, ShapeMismatchError
from trnlab.hardware.system import GenerationError, RandomRangeError

P = 4


def xorwow(words, count):
    """Marsaglia's XORWOW, one generator: `words` = [x, y, z, w, v, d]; `count` outputs (Python ints)."""
    x, y, z, w, v, d = (int(a) for a in words)
    out = []
    for _ in range(count):
        t = x ^ (x >> 2)
        x, y, z, w = y, z, w, v
        v = (v ^ ((v << 4) & 0xFFFFFFFF)) ^ (t ^ ((t << 1) & 0xFFFFFFFF))
        d = (d + 362437) & 0xFFFFFFFF
        out.append((v + d) & 0xFFFFFFFF)
    return out


def expected_draws(state, count):
    """[lanes, count]: element j of a lane from its generator j mod k (k = words / 6)."""
    lanes, words = state.shape
    k = words // 6
    streams = [[xorwow(state[p, 6 * g:6 * g + 6], -(-count // k)) for g in range(k)] for p in range(lanes)]
    return np.array([[streams[p][j % k][j // k] for j in range(count)] for p in range(lanes)], np.uint64)


def _state(words, seed=7):
    return np.random.default_rng(seed).integers(1, 2 ** 32, size=(P, words), dtype=np.uint64).astype(np.uint32)


def _draw_kernel(engine, out_dtype, keyword: bool):
    @nki.jit
    def kernel(state):
        seeds = nl.load(state)
        out = nl.ndarray((P, 10), dtype=out_dtype, buffer=nl.shared_hbm)
        bits = nl.ndarray((P, 10), dtype=out_dtype, buffer=nl.sbuf)
        if keyword:
            nisa.rand_set_state(src_seeds=seeds, engine=engine)
            nisa.rng(dst=bits, engine=engine)
        else:
            nisa.rand_set_state(seeds, engine)
            nisa.rng(bits, engine)
        nl.store(out, value=bits)
        return out
    return kernel


@pytest.mark.parametrize("keyword", [True, False])
def test_rng_draws_xorwow_from_the_state_rand_set_state_wrote_gpsimd(keyword):
    state = _state(6)
    out = nki.run(_draw_kernel(nisa.gpsimd_engine, nl.uint32, keyword), state, target="trn2").outputs
    np.testing.assert_array_equal(out.astype(np.uint64), expected_draws(state, 10))


def test_rng_on_the_vector_engine_interleaves_four_generators_per_lane():
    state = _state(24)
    out = nki.run(_draw_kernel(nisa.vector_engine, nl.uint32, True), state, target="trn3").outputs
    np.testing.assert_array_equal(out.astype(np.uint64), expected_draws(state, 10))


@pytest.mark.parametrize("dtype", [nl.uint16, nl.int16, nl.uint8, nl.int8, nl.int32])
def test_rng_keeps_the_least_significant_bits(dtype):
    state = _state(6)
    out = nki.run(_draw_kernel(nisa.gpsimd_engine, dtype, True), state, target="trn2").outputs
    bits = expected_draws(state, 10).astype(np.uint32)
    want = bits.astype(np.dtype(f"u{np.dtype(dtype).itemsize}")).view(dtype)
    np.testing.assert_array_equal(out, want)


def test_rand_get_state_reads_back_the_state_and_its_advance():
    state = _state(6)

    @nki.jit
    def kernel(s):
        before = nl.ndarray((P, 6), dtype=nl.uint32, buffer=nl.shared_hbm)
        after = nl.ndarray((P, 6), dtype=nl.uint32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, 6), dtype=nl.uint32, buffer=nl.sbuf)
        bits = nl.ndarray((P, 3), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_set_state(nl.load(s), engine=nisa.gpsimd_engine)
        nisa.rand_get_state(t, engine=nisa.gpsimd_engine)
        nl.store(before, value=t)
        nisa.rng(bits, engine=nisa.gpsimd_engine)
        t2 = nl.ndarray((P, 6), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=t2, engine=nisa.gpsimd_engine)
        nl.store(after, value=t2)
        return before, after

    before, after = nki.run(kernel, state, target="trn2").outputs
    np.testing.assert_array_equal(before, state)
    assert after[0, 5] == (int(state[0, 5]) + 3 * 362437) & 0xFFFFFFFF       # the Weyl counter, 3 draws on
    assert xorwow(after[0], 1)[0] == xorwow(state[0], 4)[3]                    # the 4th draw comes next


def _uniform_kernel(low, high, per_partition: bool):
    @nki.jit
    def kernel(state, lo, hi):
        out = nl.ndarray((P, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        vals = nl.ndarray((P, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand_set_state(nl.load(state), engine=nisa.vector_engine)
        if per_partition:
            nisa.rand2(vals, nl.load(lo), nl.load(hi))
        else:
            nisa.rand2(dst=vals, min=low, max=high)
        nl.store(out, value=vals)
        return out
    return kernel


@pytest.mark.parametrize("per_partition", [False, True])
def test_rand2_is_uniform_in_min_max_from_the_top_24_bits(per_partition):
    state = _state(24)
    lo = np.array([[-2.0], [0.0], [1.0], [5.0]], np.float32)
    hi = lo + np.array([[4.0], [1.0], [0.5], [10.0]], np.float32)
    if not per_partition:
        lo, hi = np.full((P, 1), -1.0, np.float32), np.full((P, 1), 3.0, np.float32)
    out = nki.run(_uniform_kernel(-1.0, 3.0, per_partition), state, lo, hi, target="trn3").outputs
    bits = expected_draws(state, 16).astype(np.uint32)
    want = lo + ((bits >> 8).astype(np.float32) * np.float32(2 ** -24)) * (hi - lo)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert np.all(out >= lo) and np.all(out <= hi)


def _seeded_kernel(use_language_seed: bool):
    @nki.jit
    def kernel(seed):
        out = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        s = nl.load(seed)
        if use_language_seed:
            nl.random_seed(s)
        else:
            nisa.set_rng_seed(s)
        bits = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(bits)
        nl.store(out, value=bits)
        return out
    return kernel


def test_the_same_seed_gives_the_same_numbers_and_another_seed_others():
    kernel = _seeded_kernel(False)
    a = nki.run(kernel, np.array([[42]], np.int32)).outputs
    b = nki.run(kernel, np.array([[42]], np.int32)).outputs
    c = nki.run(kernel, np.array([[43]], np.int32)).outputs
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.9
    assert len({tuple(row) for row in a}) == P                    # every lane its own stream


def test_set_rng_seed_and_nl_random_seed_seed_the_same_generators():
    seed = np.array([[9]], np.int32)
    np.testing.assert_array_equal(nki.run(_seeded_kernel(False), seed).outputs,
                                  nki.run(_seeded_kernel(True), seed).outputs)


def test_random_numbers_and_times_are_the_same_with_the_fast_paths_off(records):
    state = _state(24)
    kernel = _uniform_kernel(0.0, 1.0, False)
    fast = nki.run(kernel, state, state[:, :1].astype(np.float32), state[:, :1].astype(np.float32), target="trn3")
    with config.override(fast=False):
        slow = nki.run(kernel, state, state[:, :1].astype(np.float32), state[:, :1].astype(np.float32), target="trn3")
    np.testing.assert_array_equal(fast.outputs, slow.outputs)
    assert records(fast) == records(slow)
    assert ("dve", "rand2") in [r[:2] for r in records(fast)]


def test_rand2_needs_neuroncore_v4():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        vals = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.rand2(vals, 0.0, 1.0)
        nl.store(out, value=vals)
        return out
    with pytest.raises(GenerationError, match="NeuronCore-v4"):
        nki.run(kernel, np.zeros((1, 1), np.float32), target="trn2")
    assert nki.run(kernel, np.zeros((1, 1), np.float32), target="trn3").outputs.shape == (P, 4)


def test_rand2_refuses_min_not_below_max():
    with pytest.raises(RandomRangeError, match="min must be below max"):
        nki.run(_uniform_kernel(2.0, 1.0, False), _state(24), np.zeros((P, 1), np.float32),
                np.ones((P, 1), np.float32), target="trn3")


def test_rng_refuses_a_float_destination():
    with pytest.raises(DtypeError, match="rng dst must be one of"):
        nki.run(_draw_kernel(nisa.gpsimd_engine, nl.float32, True), _state(6), target="trn2")


def test_rng_on_gpsimd_needs_neuroncore_v3_and_the_state_needs_v3():
    @nki.jit
    def kernel(x):
        out = nl.ndarray((P, 4), dtype=nl.uint32, buffer=nl.shared_hbm)
        bits = nl.ndarray((P, 4), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(bits, engine=nisa.gpsimd_engine)
        nl.store(out, value=bits)
        return out
    with pytest.raises(EngineError, match="cannot run on"):
        nki.run(kernel, np.zeros((1, 1), np.float32), target="trn1")
    with pytest.raises(GenerationError, match="NeuronCore-v3"):
        nki.run(_draw_kernel(nisa.vector_engine, nl.uint32, True), _state(24), target="trn1")


def test_rand_set_state_needs_the_engines_word_count():
    with pytest.raises(ShapeMismatchError, match="XORWOW state is 6"):
        nki.run(_draw_kernel(nisa.gpsimd_engine, nl.uint32, True), _state(24), target="trn2")
    with pytest.raises(EngineError, match="cannot run on"):           # Vector state from NeuronCore-v4 only
        nki.run(_draw_kernel(nisa.vector_engine, nl.uint32, True), _state(24), target="trn2")


def test_set_rng_seed_takes_one_32_bit_value():
    with pytest.raises(ShapeMismatchError, match=r"\[1, 1\]"):
        nki.run(_seeded_kernel(False), np.array([[1, 2]], np.int32))
    with pytest.raises(DtypeError, match="32-bit"):
        nki.run(_seeded_kernel(False), np.array([[1]], np.int16))


def _language_rand_kernel(use_rand2: bool, buffer):
    @nki.jit
    def kernel(seed):
        nl.random_seed(nl.load(seed))
        if use_rand2:
            vals = nl.ndarray((P, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.rand2(vals, 0.0, 1.0)
        else:
            vals = nl.rand((P, 32), dtype=nl.float32, buffer=buffer)
        if buffer is nl.shared_hbm and not use_rand2:
            return vals
        out = nl.ndarray((P, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=vals)
        return out
    return kernel


@pytest.mark.parametrize("buffer", [nl.sbuf, nl.shared_hbm])
def test_nl_rand_is_uniform_in_0_1_from_the_seeded_vector_generators(buffer):
    seed = np.array([[5]], np.int32)
    values = nki.run(_language_rand_kernel(False, buffer), seed, target="trn3").outputs
    assert values.min() >= 0.0 and values.max() < 1.0 and abs(values.mean() - 0.5) < 0.1
    np.testing.assert_array_equal(values, nki.run(_language_rand_kernel(True, None), seed, target="trn3").outputs)
    np.testing.assert_array_equal(values, nki.run(_language_rand_kernel(False, buffer), seed, target="trn3").outputs)
