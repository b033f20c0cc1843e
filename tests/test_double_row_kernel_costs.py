"""The per-instruction Vector-engine costs that AWS's double-row matmul kernel exposed, as AWS's NKI
API pages give them ("Estimated instruction cost", docs/calibration.md):

- nki.isa.tensor_tensor: N cycles with one input in PSUM and the other in SBUF (2N otherwise; N for
  bf16 add / multiply / subtract in SBUF on NeuronCore-v2, the performance mode's from v3 on);
- nki.isa.memset: N/2 cycles when it writes zero into a bf16/fp16 tile, N otherwise;
and one the Trainium2 guide gives: fp32 nc_transpose at half an fp32 matmul's cost (transpose mode).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from trnlab.hardware import NeuronCore, cost, presets

TRN1, TRN2, TRN3 = (presets.core_spec(t) for t in ("trn1", "trn2", "trn3"))


def _op(memory, dtype, n, contiguous=True):
    itemsize = 2 if dtype in ("bfloat16", "float16") else 4
    return cost.Operand(memory, (128, n), dtype, 128, n, 128 * n * itemsize, 0, contiguous)


def _cycles(spec, opcode, reads, writes, **attrs):
    return cost.cost(cost.Instruction(opcode, "dve", tuple(reads), tuple(writes), attrs), spec).cycles


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 4096), spec=st.sampled_from([TRN1, TRN2, TRN3]),
       dtypes=st.tuples(*[st.sampled_from(["float32", "bfloat16"])] * 3), psum_first=st.booleans())
def test_tensor_tensor_with_one_psum_input_streams_n_cycles(n, spec, dtypes, psum_first):
    psum, sbuf = _op("psum", dtypes[0], n), _op("sbuf", dtypes[1], n)
    reads = (psum, sbuf) if psum_first else (sbuf, psum)
    assert _cycles(spec, "tensor_tensor", reads, [_op("sbuf", dtypes[2], n)], op="add") == \
        spec.vector_static_cycles + n


def test_tensor_tensor_in_sbuf_streams_2n_unless_a_bf16_fast_case():
    f32, b16 = _op("sbuf", "float32", 512), _op("sbuf", "bfloat16", 512)
    strided = _op("sbuf", "bfloat16", 512, contiguous=False)
    s1, s2 = TRN1.vector_static_cycles, TRN2.vector_static_cycles
    assert _cycles(TRN1, "tensor_tensor", [f32, f32], [f32], op="add") == s1 + 1024
    assert _cycles(TRN1, "tensor_tensor", [b16, b16], [b16], op="multiply") == s1 + 512   # the page's bf16 case
    assert _cycles(TRN1, "tensor_tensor", [b16, b16], [b16], op="maximum") == s1 + 1024   # not add/mul/sub
    assert _cycles(TRN1, "tensor_tensor", [b16, strided], [b16], op="add") == s1 + 1024   # not contiguous
    assert _cycles(TRN2, "tensor_tensor", [f32, f32], [f32], op="add") == s2 + 1024
    assert _cycles(TRN2, "tensor_tensor", [b16, b16], [b16], op="maximum") == s2 + 512    # performance mode


@pytest.mark.parametrize("spec", [TRN1, TRN2, TRN3])
def test_memset_of_zero_into_a_16_bit_tile_takes_half_the_cycles(spec):
    s = spec.vector_static_cycles
    for dtype, zero, per_partition in (("bfloat16", True, 1024), ("float16", True, 1024),
                                       ("bfloat16", False, 2048), ("float32", True, 2048)):
        assert _cycles(spec, "memset", (), [_op("sbuf", dtype, 2048)], zero=zero, inputs=1) == s + per_partition


def test_the_core_passes_the_fill_value_and_the_operator_to_the_cost():
    core = NeuronCore(presets.core_spec("trn2"), mode="timing")
    ns = 1e9 / core.spec.dve_clock_hz
    s = core.spec.vector_static_cycles
    a = core.sbuf.allocate((128, 2048), "bfloat16")
    first = core.timeline[core.memset(a, 0.0)]                       # first of the launch: pays the static
    assert first.duration_ns == pytest.approx((s + 1024) * ns)
    b = core.sbuf.allocate((128, 2048), "bfloat16")
    other = core.timeline[core.memset(b, 1.5)]
    assert other.duration_ns == pytest.approx(2048 * ns)             # back to back: static hidden, N
    acc = core.psum.allocate((128, 512), "float32")
    core.memset(acc, 0.0)
    c = core.sbuf.allocate((128, 512), "bfloat16")
    core.memset(c, 0.0)
    add = core.timeline[core.tensor_tensor(c, c, acc, "add")]      # reads PSUM: N, not 2N
    assert add.duration_ns == pytest.approx((s + 512) * ns)


def test_double_row_kernel_vector_work_follows_the_pages():
    """The accumulate-from-PSUM add and the zeroed bf16 block of AWS's double-row kernel, at its
    shapes: [128, 512] fp32 PSUM + bf16 SBUF -> 512 cycles; memset 0 of [128, 2048] bf16 -> 1024."""
    s = TRN2.vector_static_cycles
    add = _cycles(TRN2, "tensor_tensor", [_op("sbuf", "bfloat16", 512), _op("psum", "float32", 512)],
                  [_op("sbuf", "bfloat16", 512)], op="add")
    zero = _cycles(TRN2, "memset", (), [_op("sbuf", "bfloat16", 2048)], zero=True, inputs=1)
    assert (add - s, zero - s) == (512, 1024)
    assert np.isclose((add - s) / TRN2.dve_clock_hz * 1e9, 533.3, atol=0.1)


def test_fp32_transpose_runs_twice_as_fast_in_the_transpose_mode_of_neuroncore_v3():
    # [ARCH-v3] "Built-in Transpose Support": "2x speedup in FP32 transpose, vs. no transpose mode"
    src32 = _op("sbuf", "float32", 128)
    src16 = _op("sbuf", "bfloat16", 128)

    def busy(spec, src):
        return cost.cost(cost.Instruction("nc_transpose", "pe", (src,), ()), spec).cycles
    assert busy(TRN1, src32) == TRN1.fp32_matmul_factor * busy(TRN1, src16)          # v2: an fp32 matmul
    for spec in (TRN2, TRN3):
        assert busy(spec, src32) == spec.fp32_matmul_factor // 2 * busy(spec, src16)
