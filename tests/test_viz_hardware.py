"""Every hardware picture in trnlab.viz is drawn on small inputs (Agg backend) and shows what it claims."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from trnlab.hardware.systolic import simulate_matmul  # noqa: E402
from trnlab.viz import roofline, systolic, tiles  # noqa: E402

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


def test_gemm_tiles_counts_instructions_and_padding():
    fig = tiles.plot_gemm_tiles(M=300, N=1000, K=384, output_tile=(1, 1))
    title = fig._suptitle.get_text()
    assert "3 × 2 × 3 = 18 nc_matmul" in title  # ceil(300/128) x ceil(1000/512) x ceil(384/128)
    useful = 300 * 1000 * 384 / (384 * 1024 * 384)
    assert f"{100 * useful:.0f}%" in title
    with pytest.raises(IndexError, match="out of range"):
        tiles.plot_gemm_tiles(M=128, N=512, K=128, output_tile=(1, 0))


def test_roofline_point_and_ridge_come_from_the_given_numbers():
    fig = roofline.plot_roofline(80e12, 400e9, [("gemm", 100.0, 20e12), ("add", 0.25, 0.05e12)])
    texts = _texts(fig)
    assert any("ridge 200 FLOP/byte" in t for t in texts)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "gemm: 20.00 TFLOPS at 100.0 FLOP/B (50% of the roof, memory-bound)" in legend
    assert np.isclose(roofline.attainable_flops(1e6, 80e12, 400e9), 80e12)
