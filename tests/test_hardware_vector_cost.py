"""The Vector engine's cost rules (trnlab/hardware/cost.py, docs/calibration.md):

- [ARCH-v2] "Cost Model": roughly N cycles per input tile; the 100-cycle static overhead is added
  only for back-to-back instructions with N << 128 or each depending on the previous one's output;
- [ARCH-v3] "Vector Engine Performance Mode": bf16/fp16 tensor_copy / tensor_scalar 4x (all SBUF,
  inner-most free axis contiguous) or 2x, tensor_tensor 2x (both inputs in SBUF);
- `nl.copy` runs on the Scalar engine (nki.language.copy: "Uses the Scalar Engine").
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import NeuronCore, cost, presets
from trnlab.hardware.device import Device

TRN2 = presets.core_spec("trn2")
TRN1 = presets.core_spec("trn1")
DVE_NS = 1e9 / TRN2.dve_clock_hz
STATIC = TRN2.vector_static_cycles


def _scale(core, dst, src):
    """One one-input Vector instruction (tensor_scalar multiply by 2); returns its record."""
    return core.timeline[core.tensor_scalar(dst, src, "multiply", 2.0)]


def _tiles(core, n, shape, dtype="float32"):
    return [core.sbuf.allocate(shape, dtype) for _ in range(n)]


# -- rule 1: the static overhead, where [ARCH-v2] charges it ----------------------------------------
def test_vector_static_overhead_is_hidden_behind_an_independent_predecessor():
    core = NeuronCore(TRN2, mode="timing")
    a, b, c, d = _tiles(core, 4, (128, 512))
    first = _scale(core, b, a)              # nothing before it on the engine: pays the overhead
    second = _scale(core, d, c)             # independent, ready when the engine frees: N only
    assert first.duration_ns == pytest.approx((STATIC + 512) * DVE_NS)
    assert second.duration_ns == pytest.approx(512 * DVE_NS)
    assert second.start_ns == pytest.approx(first.end_ns)


def test_vector_static_overhead_is_charged_when_reading_the_previous_result():
    core = NeuronCore(TRN2, mode="timing")
    a, b, c = _tiles(core, 3, (128, 512))
    _scale(core, b, a)
    chained = _scale(core, c, b)            # reads the tile its predecessor just wrote
    assert chained.duration_ns == pytest.approx((STATIC + 512) * DVE_NS)


def test_vector_static_overhead_is_charged_for_small_free_sizes():
    core = NeuronCore(TRN2, mode="timing")
    a, b, c, d = _tiles(core, 4, (128, 32))
    _scale(core, b, a)
    small = _scale(core, d, c)              # independent, but N = 32 << 128
    assert small.duration_ns == pytest.approx((STATIC + 32) * DVE_NS)
    wide = _tiles(core, 2, (128, TRN2.vector_static_hidden_min_free))
    assert _scale(core, wide[1], wide[0]).duration_ns == pytest.approx(
        TRN2.vector_static_hidden_min_free * DVE_NS)   # N = 128 counts as large


def test_vector_static_overhead_is_charged_after_the_engine_waited_for_data():
    core = NeuronCore(TRN2, mode="timing")
    a, b = _tiles(core, 2, (128, 512))
    _scale(core, b, a)
    late = core.sbuf.allocate((128, 512), "float32")
    core.dma_copy(late, core.hbm.tensor(np.ones((128, 512), np.float32)))   # arrives µs later
    waited = _scale(core, core.sbuf.allocate((128, 512), "float32"), late)
    assert waited.duration_ns == pytest.approx((STATIC + 512) * DVE_NS)


def test_gpsimd_and_scalar_keep_their_own_static_figures():
    core = NeuronCore(TRN2, mode="timing")
    a, b, c, d = _tiles(core, 4, (128, 512))
    core.tensor_scalar(b, a, "multiply", 2.0, engine="gpsimd")
    pool = core.timeline[core.tensor_scalar(d, c, "multiply", 2.0, engine="gpsimd")]
    assert pool.duration_ns == pytest.approx((STATIC + 512) * 1e9 / TRN2.pool_clock_hz)
    assert cost.vector_hidden_static_cycles(TRN2, "pool", 512, False) == 0
    assert cost.vector_hidden_static_cycles(TRN2, "act", 512, False) == 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([16, 64, 128, 256, 512, 2048]), min_size=1, max_size=12))
def test_independent_vector_stream_pays_the_overhead_once_plus_once_per_small_instruction(sizes):
    core = NeuronCore(TRN2, mode="timing")
    records = []
    for n in sizes:
        src, dst = _tiles(core, 2, (128, n))
        records.append(_scale(core, dst, src))
    small = sum(1 for n in sizes[1:] if n < TRN2.vector_static_hidden_min_free)
    span = records[-1].end_ns - records[0].start_ns
    assert span == pytest.approx((STATIC * (1 + small) + sum(sizes)) * DVE_NS)
    assert all(r.start_ns == pytest.approx(p.end_ns) for p, r in zip(records, records[1:]))


@given(st.floats(0, 1e6), st.floats(0, 1e3), st.floats(0, 1e6), st.floats(0, 1e6), st.booleans())
def test_issue_busy_ns_only_ever_removes_the_hidden_part(busy, hidden, ready, free, follows):
    got = cost.issue_busy_ns(busy + hidden, hidden, ready, free, follows)
    assert got == pytest.approx(busy if ready <= free and follows else busy + hidden)


@nki.jit
def _independent_and_chained(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.multiply(x, 2.0)                 # waits for the load
    z = nl.multiply(x, 3.0)                 # independent of y: back to back
    w = nl.add(y, z)                        # reads z, its predecessor's result
    s = nl.multiply(w, 0.5)
    nl.store(out, s)
    return out


def _records(program, checked):
    from trnlab.hardware import device as device_module
    device = Device("trn2", mode="timing", cores=1)
    original = device_module.execute
    device_module.execute = lambda *a, **k: original(*a, **k, checked=checked)
    try:
        for _ in range(2):
            device.run(program, None)
    finally:
        device_module.execute = original
    return device.cores[0].timeline.records


def test_compiled_replay_hides_the_vector_overhead_like_the_core():
    program = nki.trace(_independent_and_chained, nki.ShapeDtype((128, 512), "float32"), target="trn2")
    fast, checked = _records(program, False), _records(program, True)
    assert fast == checked
    dve = [r for r in fast if r[0] == 2][:4]   # engine 2: Vector; the first launch
    durations = [round((r[3] - r[2]) / DVE_NS) for r in dve]
    assert durations == [STATIC + 512, 512, STATIC + 1024, STATIC + 512]


# -- rule 2: the Trn2 Vector performance mode ---------------------------------------------------------
def _op(memory, dtype, n=512, contiguous=True):
    itemsize = 2 if dtype in ("bfloat16", "float16") else 4
    return cost.Operand(memory, (128, n), dtype, 128, n, 128 * n * itemsize, 0, contiguous)


def _cycles(spec, opcode, reads, writes):
    return cost.cost(cost.Instruction(opcode, "dve", tuple(reads), tuple(writes)), spec).cycles


@pytest.mark.parametrize("opcode", ["tensor_copy", "tensor_scalar"])
def test_vector_perf_mode_speeds_up_bf16_copies_and_tensor_scalar(opcode):
    sbuf16, sbuf32 = _op("sbuf", "bfloat16"), _op("sbuf", "float32")
    strided = _op("sbuf", "bfloat16", contiguous=False)
    psum16 = _op("psum", "bfloat16")
    assert _cycles(TRN2, opcode, [sbuf16], [_op("sbuf", "float16")]) == STATIC + 512 // 4
    assert _cycles(TRN2, opcode, [strided], [sbuf16]) == STATIC + 512 // 2
    assert _cycles(TRN2, opcode, [psum16], [sbuf16]) == STATIC + 512 // 2
    assert _cycles(TRN2, opcode, [_op("psum", "float32")], [sbuf16]) == STATIC + 512   # fp32 input
    assert _cycles(TRN2, opcode, [sbuf32], [sbuf32]) == STATIC + 512
    assert _cycles(TRN1, opcode, [sbuf16], [sbuf16]) == STATIC + 512     # NeuronCore-v2: no mode


def test_vector_perf_mode_doubles_bf16_tensor_tensor_with_sbuf_inputs():
    a, b = _op("sbuf", "bfloat16"), _op("sbuf", "bfloat16")
    assert _cycles(TRN2, "tensor_tensor", [a, b], [_op("psum", "bfloat16")]) == STATIC + 512
    # one input in PSUM: N, not 2N (nki.isa.tensor_tensor, "Estimated instruction cost")
    assert _cycles(TRN2, "tensor_tensor", [a, _op("psum", "bfloat16")], [a]) == STATIC + 512
    assert _cycles(TRN2, "tensor_tensor", [a, b], [_op("sbuf", "float32")]) == STATIC + 2 * 512
    assert _cycles(TRN2, "tensor_reduce", [a], [_op("sbuf", "bfloat16", 1)]) == STATIC + 512   # not listed


def test_vector_perf_mode_sees_a_strided_view_as_not_contiguous():
    core = NeuronCore(TRN2, mode="timing")
    src = core.sbuf.allocate((128, 1024), "bfloat16")
    dst = core.sbuf.allocate((128, 512), "bfloat16")
    assert cost.operand(src[:, 0:512]).inner_contiguous
    assert not cost.operand(src[:, ::2]).inner_contiguous
    whole = core.timeline[core.tensor_copy(dst, src[:, 0:512])]
    strided = core.timeline[core.tensor_copy(dst, src[:, ::2])]   # overwrites dst, reads nothing new
    assert whole.duration_ns == pytest.approx((STATIC + 512 // 4) * DVE_NS)
    assert strided.duration_ns == pytest.approx(512 // 2 * DVE_NS)   # back to back: no overhead


# -- rule 3: nl.copy on the Scalar engine -----------------------------------------------------------------
@nki.jit
def _copies(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.copy(x)                                           # Scalar engine [nki.language.copy]
    z = nisa.tensor_copy(y, engine=nisa.vector_engine)       # an explicit choice is kept
    nl.store(out, z)
    return out


def test_nl_copy_runs_on_the_scalar_engine_and_tensor_copy_keeps_its_engine():
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    result = nki.run(_copies, x, target="trn2", timing_only=False)
    np.testing.assert_array_equal(np.asarray(result.outputs), x)
    engines = [r.engine for r in (result.timeline[i] for i in range(len(result.timeline)))
               if r.opcode == "tensor_copy"]
    assert engines == ["act", "dve"]
