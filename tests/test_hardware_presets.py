"""Presets: the published numbers, derived figures, and one-line custom cores."""
import pytest

from trnlab.hardware import NeuronCore, cost, presets
from trnlab.hardware.presets import GiB, KiB, MiB


def test_sbuf_and_psum_sizes_match_the_architecture_pages():
    assert presets.TRN1.core.sbuf_bytes == 24 * MiB
    assert presets.TRN2.core.sbuf_bytes == 28 * MiB
    assert presets.TRN3.core.sbuf_bytes == 32 * MiB
    for chip in (presets.TRN1, presets.TRN2, presets.TRN3):
        assert chip.core.psum_bytes == 2 * MiB
        assert chip.core.psum_bank_bytes == 2 * KiB          # 512 fp32 per partition per bank


def test_peak_flops_is_array_times_clock():
    # 128 x 128 PEs x 2 FLOP x 2.8 GHz ~ 91.8 TFLOPS (v2); x 2.4 GHz ~ 78.6 (v3, v4)
    assert presets.TRN1.core.peak_flops("bfloat16") == pytest.approx(91.75e12, rel=1e-3)
    assert presets.TRN2.core.peak_flops("bfloat16") == pytest.approx(78.64e12, rel=1e-3)
    assert presets.TRN2.core.peak_flops("float32") == pytest.approx(78.64e12 / 4, rel=1e-3)
    # the simulator's figure agrees with the quoted one within 1 %
    for core in (presets.TRN1.core, presets.TRN2.core, presets.TRN3.core):
        assert core.peak_flops("bfloat16") / 1e12 == pytest.approx(core.quoted_tflops_bf16, rel=0.01)


def test_hbm_share_per_core_is_chip_divided_by_cores():
    for chip in (presets.TRN1, presets.TRN2, presets.TRN3):
        assert chip.core.hbm_bandwidth * chip.cores == pytest.approx(chip.hbm_bandwidth)
        assert chip.core.hbm_bytes * chip.cores == chip.hbm_bytes
    assert presets.TRN1.core.ridge_flops_per_byte == pytest.approx(224, rel=0.01)


def test_servers():
    assert presets.TRN1_32XLARGE.chips == 16 and presets.TRN1_32XLARGE.cores == 32
    assert presets.TRN2_48XLARGE.hbm_bytes == 1536 * GiB
    assert presets.TRN2_ULTRASERVER.chips == 64
    assert presets.TRN3_ULTRASERVER_GEN1.chips == 64
    assert presets.TRN3_ULTRASERVER_GEN2.chips == 144
    assert presets.TRN3_ULTRASERVER_GEN2.hbm_bytes == 20736 * GiB


def test_derive_changes_only_what_is_asked_and_everything_downstream_follows():
    tiny = presets.derive(pe_rows=4, pe_cols=4, matmul_min_cycles=1)
    assert (tiny.pe_rows, tiny.pe_cols, tiny.matmul_min_cycles) == (4, 4, 1)
    assert tiny.sbuf_partition_bytes == presets.TRN2.core.sbuf_partition_bytes
    assert tiny.peak_flops("bfloat16") == pytest.approx(2 * 16 * 2.4e9)
    # the cost model reads the spec: N + K + M - 2 cycles for the small array
    assert cost.matmul_cycles(tiny, 4, 4, 6, "bfloat16") == (6, 6 + 4 + 4 - 2)
    # the core's limits follow the derived array: K <= 4 now
    core = NeuronCore(tiny, mode="timing")
    assert core._max_k == 4 and core._max_m == 4
    half = presets.TRN1.core.derive(sbuf_partition_bytes=96 * KiB)
    assert NeuronCore(half).sbuf.partition_bytes == 96 * KiB
    with pytest.raises(TypeError):
        presets.TRN2.core.derive(no_such_field=1)


def test_chip_derive_and_target_names():
    chip = presets.TRN2.derive(pe_rows=64)
    assert chip.core.pe_rows == 64 and chip.cores == 8
    assert presets.core_spec("trn3") is presets.TRN3.core
    with pytest.raises(ValueError):
        presets.core_spec("trn9")
    rows = presets.comparison_table()
    assert [r["core"] for r in rows] == [c.core.name for c in (presets.TRN1, presets.TRN2, presets.TRN3)]
