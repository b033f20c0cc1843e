"""Every hardware picture in trnlab.viz is drawn on small inputs (Agg backend) and shows what it claims."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from trnlab.hardware.systolic import simulate_matmul  # noqa: E402
from trnlab.hardware import presets  # noqa: E402
from trnlab.hardware.memory import OnChipMemory  # noqa: E402
from trnlab.hardware.timeline import Timeline  # noqa: E402
from trnlab.viz import memory_map, roofline, systolic, tiles, timeline  # noqa: E402

TINY = SimpleNamespace(pe_rows=4, pe_cols=4)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture
def trace():
    rng = np.random.default_rng(0)
    stationary = rng.integers(-3, 4, (3, 2)).astype(np.float32)
    moving = rng.integers(-3, 4, (3, 4)).astype(np.float32)
    return simulate_matmul(stationary, moving, TINY)


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title() for ax in fig.axes]


def test_systolic_cycle_picture_shows_busy_pes_and_psum_written_so_far(trace):
    last = trace.cycles - 1
    fig = systolic.draw_cycle(trace, last)
    texts = _texts(fig)
    assert any(f"cycle {trace.cycles} of {trace.cycles}" in t for t in texts)
    # at the last cycle every result is in PSUM, so each value appears as a label in the PSUM panel
    psum_labels = [t.get_text() for t in fig.axes[1].texts]
    assert len(psum_labels) == trace.M * trace.N
    with pytest.raises(IndexError, match="takes"):
        systolic.draw_cycle(trace, trace.cycles)


def test_systolic_animation_is_embeddable_html_with_few_frames(trace):
    html = systolic.animate(trace, max_frames=4, dpi=40)
    assert "<script" in html
    assert html.count("data:image/png;base64") == 4  # one embedded image per frame, no more


def test_systolic_slider_steps_cycles(trace):
    widget = systolic.cycle_slider(trace)
    slider = widget.children[0]
    assert (slider.min, slider.max) == (1, trace.cycles)
    slider.value = 3  # redraws without error


def test_systolic_utilisation_plot_reports_the_mean(trace):
    fig = systolic.plot_utilisation(trace)
    assert f"{100 * trace.utilisation.mean():.0f}% busy" in fig.axes[0].get_title()


def test_gemm_tiles_counts_instructions_cycles_and_utilisation():
    fig = tiles.plot_gemm_tiles(M=300, N=1000, K=384, output_tile=(1, 1))
    title = fig._suptitle.get_text()
    assert "3 × 2 × 3 = 18 nc_matmul" in title  # ceil(300/128) x ceil(1000/512) x ceil(384/128)
    assert "9,000 tensor-engine cycles" in title  # 9 (m, k) pairs x (512 + 488) streamed columns
    assert f"PE utilisation {100 * 300 * 1000 * 384 / (128 * 128 * 9000):.0f}%" in title
    with pytest.raises(IndexError, match="out of range"):
        tiles.plot_gemm_tiles(M=128, N=512, K=128, output_tile=(1, 0))


@pytest.mark.parametrize("shape", [(300, 1000, 384), (128, 512, 128), (64, 100, 50), (257, 513, 129)])
def test_tensor_engine_work_equals_the_reference_drivers_timeline(shape):
    from trnlab.hardware import gemm

    spec = presets.TRN2.core
    _, core = gemm.run_gemm(shape=shape, spec=spec, mode="timing")
    profile = core.profile()
    work = tiles.tensor_engine_work(spec, *shape)
    assert work.instructions == profile.instructions["nc_matmul"]
    assert work.busy_cycles == pytest.approx(profile.busy_ns["pe"] * spec.pe_clock_hz / 1e9)


def test_roofline_point_and_ridge_come_from_the_given_numbers():
    fig = roofline.plot_roofline(80e12, 400e9, [("gemm", 100.0, 20e12), ("add", 0.25, 0.05e12)])
    texts = _texts(fig)
    assert any("ridge 200 FLOP/byte" in t for t in texts)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "gemm: 20.00 TFLOPS at 100.0 FLOP/B (50% of the roof, memory-bound)" in legend
    assert "add: 0.05 TFLOPS at 0.2 FLOP/B (50% of the roof, memory-bound)" in legend


def test_a_point_far_below_its_roof_is_latency_bound_not_memory_bound():
    """Fixed costs, not bandwidth, limit a kernel at 1 % of its memory roof: the legend and the
    compiled model's profile both say latency-bound (hardware.profile.roofline_bound)."""
    from trnlab.hardware.profile import roofline_bound
    fig = roofline.plot_roofline(80e12, 400e9, [("tiny", 1.0, 4e9)])          # roof 400 GFLOP/s
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["tiny: 0.00 TFLOPS at 1.0 FLOP/B (1% of the roof, latency-bound)"]
    assert roofline_bound(1e6, 1e6, 1e6 / 400e9 * 11, 80e12, 400e9) == "latency"
    assert roofline_bound(1e6, 1e6, 1e6 / 400e9 * 9, 80e12, 400e9) == "memory"
    assert roofline_bound(1e9, 1e6, 1e9 / 80e12 * 2, 80e12, 400e9) == "compute"
    assert np.isclose(roofline.attainable_flops(1e6, 80e12, 400e9), 80e12)


def test_tensor_engine_work_counts_tiles_and_cost_model_cycles():
    spec = presets.TRN2.core
    work = tiles.tensor_engine_work(spec, M=300, N=1000, K=384)
    assert work.instructions == 3 * 2 * 3
    # every instruction is busy max(n, 64) cycles in bf16: n = 512 for the first N tile, 488 for the second
    assert work.busy_cycles == 3 * 3 * (512 + 488)
    assert tiles.tensor_engine_work(spec, 128, 512, 128).utilisation == 1.0
    # one row too many doubles the instructions for the same useful work
    assert tiles.tensor_engine_work(spec, 129, 512, 128).utilisation == pytest.approx(129 / 256)


def test_matmul_cost_and_utilisation_plots_draw_from_the_cost_model():
    spec = presets.TRN2.core
    fig = tiles.plot_matmul_cost(spec, n_values=[1, 64, 128, 512])
    busy_bf16 = fig.axes[0].lines[0].get_ydata()
    assert list(busy_bf16) == [64, 64, 128, 512]  # max(N, 64)
    fig = tiles.plot_utilisation_vs_size(spec, [64, 128, 129, 256])
    shares = fig.axes[0].lines[0].get_ydata()
    assert shares[1] == pytest.approx(100.0) and shares[2] < 60


def test_core_rooflines_show_each_generations_ridge():
    cores = [presets.TRN1.core, presets.TRN2.core, presets.TRN3.core]
    fig = roofline.plot_core_rooflines(cores)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(legend) == 3
    assert f"ridge {presets.TRN1.core.ridge_flops_per_byte:.0f} FLOP/B" in legend[0]


def test_memory_map_draws_each_allocation_and_psum_banks():
    spec = presets.TRN2.core
    sbuf = OnChipMemory("sbuf", spec, with_data=False)
    sbuf.allocate((128, 2048), "bfloat16", name="x")
    sbuf.allocate((64, 8192), "float32", name="y")
    fig = memory_map.plot_memory_map(sbuf)
    ax = fig.axes[0]
    assert "36.0 KiB of 224.0 KiB per partition" in ax.get_title()  # 4 KiB + 32 KiB
    # y uses 64 partitions: a solid block plus a hatched block for the reserved-but-unused rest
    assert sum(1 for p in ax.patches if p.get_hatch()) == 1
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["x: 128×2048 bfloat16, 4.0 KiB/partition on 128", "y: 64×8192 float32, 32.0 KiB/partition on 64"]
    psum = OnChipMemory("psum", spec, with_data=False)
    psum.allocate((128, 512), "float32", name="acc")
    fig = memory_map.plot_memory_map(psum)
    assert sum("bank" in t.get_text() for t in fig.axes[0].texts) == spec.psum_banks


def _small_timeline() -> Timeline:
    tl = Timeline(["pe", "act", "dve", "pool", "dma0", "dma1"])
    # (engine, opcode, start, end, ready, flops, hbm, sbuf, psum, waited_for, note)
    tl.records += [
        (4, "dma_copy", 0.0, 1500.0, 1500.0, 0, 65536, 65536, 0, -1, ""),
        (5, "dma_copy", 0.0, 1500.0, 1500.0, 0, 65536, 65536, 0, -1, ""),
        (0, "nc_matmul", 1500.0, 1713.0, 1820.0, 2 * 128 * 128 * 512, 0, 0, 0, 0, ""),
        (2, "tensor_copy", 1820.0, 2500.0, 2500.0, 0, 0, 0, 0, 2, ""),
        (4, "dma_copy", 2500.0, 3700.0, 3700.0, 0, 0, 0, 0, 3, ""),
    ]
    return tl


def test_timeline_gantt_labels_engines_as_the_profiler_does():
    fig = timeline.plot_timeline(_small_timeline())
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["pe · Tensor (PE)", "dve · Vector (DVE)", "dma0 · DMA queue 0", "dma1 · DMA queue 1"]
    assert "5 instructions, 3.7 µs" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["dma_copy", "nc_matmul", "tensor_copy"]
    assert "until result ready in PSUM" in legend  # the matmul's fill/drain tail
    with pytest.raises(ValueError, match="empty"):
        timeline.plot_timeline(Timeline(["pe"]))


def _one_tile_matmul_core():
    """A real NeuronCore run: load Aᵀ and B, one matmul, PSUM -> SBUF -> HBM."""
    from trnlab.hardware import NeuronCore

    core = NeuronCore(presets.TRN2.core, mode="full")
    rng = np.random.default_rng(0)
    a_t = core.hbm.tensor(rng.standard_normal((128, 128)).astype(np.float32), name="a_t")
    b = core.hbm.tensor(rng.standard_normal((128, 512)).astype(np.float32), name="b")
    c = core.hbm.allocate((128, 512), "float32", name="c")
    stationary = core.sbuf.allocate((128, 128), "float32", name="stationary")
    moving = core.sbuf.allocate((128, 512), "float32", name="moving")
    acc = core.psum.allocate((128, 512), "float32", name="acc")
    result = core.sbuf.allocate((128, 512), "float32", name="result")
    core.dma_copy(dst=stationary[:, :], src=a_t[:, :])
    core.dma_copy(dst=moving[:, :], src=b[:, :])
    core.nc_matmul(dst=acc[:, :], stationary=stationary[:, :], moving=moving[:, :])
    core.tensor_copy(dst=result[:, :], src=acc[:, :])
    core.dma_copy(dst=c[:, :], src=result[:, :])
    return core


def test_gantt_and_maps_of_a_real_core_run():
    core = _one_tile_matmul_core()
    fig = timeline.plot_timeline(core.timeline)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "pe · Tensor (PE)" and labels[1] == "dve · Vector (DVE)"
    assert all(label.startswith("dma") for label in labels[2:])
    fig = memory_map.plot_core_memory(core)
    # stationary 512 B + moving 2 KiB + result 2 KiB per partition; one PSUM tile of 2 KiB (one bank)
    assert "4.5 KiB of 224.0 KiB per partition reserved (2%), 3 tensors" in fig.axes[0].get_title()
    assert "2.0 KiB of 16.0 KiB per partition reserved (12%), 1 tensor" in fig.axes[1].get_title()


def test_profile_roofline_point_is_the_profiles_intensity_and_throughput():
    core = _one_tile_matmul_core()
    profile = core.profile("float32")
    fig = roofline.plot_profile_roofline(profile, core.spec, label="one tile")
    (x,), (y,) = fig.axes[0].lines[-1].get_data()
    assert x == pytest.approx(profile.arithmetic_intensity)
    assert y == pytest.approx(profile.achieved_tflops)
    assert f"{100 * profile.mfu:.1f}% MFU" in fig.axes[0].get_title()
