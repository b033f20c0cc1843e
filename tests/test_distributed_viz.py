"""The pictures of notebook 08 draw what the package computed."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from trnlab.distributed import scaling, topology  # noqa: E402
from trnlab.viz import distributed as dviz  # noqa: E402


@pytest.mark.parametrize("p", [2, 4, 5])
def test_ring_replay_fills_every_piece_with_every_rank(p):
    schedule, states = dviz.ring_contributions(p)
    assert len(states) == len(schedule) + 1 == 2 * (p - 1) + 1
    full = (1 << p) - 1
    assert np.all(states[-1] == full)
    # after the reduce-scatter lap rank r holds the complete piece r, and nothing else is complete yet
    rs = states[p - 1]
    assert all(rs[r, r] == full for r in range(p))
    assert np.sum(rs == full) == p


def test_ring_picture_has_a_circle_and_a_grid_and_refuses_steps_past_the_end():
    fig = dviz.plot_ring_all_reduce(4, 3)
    assert "step 3 of 6: reduce-scatter" in fig.axes[0].get_title()
    assert "rank 0 has sent 24 of 48 bytes" in fig.axes[1].get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match="steps 0..6, got 7"):
        dviz.plot_ring_all_reduce(4, 7)


def test_cost_scaling_and_memory_plots_draw_one_line_or_bar_per_series():
    fig = dviz.plot_collective_cost(topology.TRN2_48XLARGE, ranks=12)  # rdh impossible on 12 ranks: left out
    assert sorted(line.get_label() for line in fig.axes[0].get_lines()) == ["mesh", "ring", "tree"]
    plt.close(fig)
    m = scaling.MODELS["GPT-2 small (124M)"]
    fig = dviz.plot_scaling({"DP": scaling.scaling(m, topology.TRN2_48XLARGE, 64, "dp")})
    assert len(fig.axes) == 2
    plt.close(fig)
    fig = dviz.plot_memory({"1 chip": scaling.memory_per_chip(m, 1)}, topology.TRN2_48XLARGE.hbm_bytes_per_rank)
    assert len(fig.axes[0].patches) == 4  # weights, gradients, optimizer, activations
    plt.close(fig)


def test_the_levels_plot_draws_one_bar_per_level_and_one_segment_per_stage():
    fig = dviz.plot_levels(topology.TRN3_ULTRASERVER_GEN2)  # groups of 4, 72 and 144 chips: 1 + 2 + 3 stages
    ax_bw, ax_t = fig.axes[:2]
    assert len(ax_bw.patches) == 3 and len(ax_t.patches) == 6
    assert [tuple(p.get_edgecolor()) for p in ax_t.patches].count((0.0, 0.0, 0.0, 1.0)) == 3  # one outlined a bar
    plt.close(fig)
