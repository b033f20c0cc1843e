"""The pictures of notebook 07 draw from the package's own objects."""
import matplotlib.pyplot as plt

from trnlab.training import AdamWConfig, compile_train_step
from trnlab.training.report import TrainingEstimate
from trnlab.training.run import tiny_model, train_batches
from trnlab.viz.training import plot_generation_costs, plot_loss_curves, plot_step_timeline


def test_step_timeline_colours_every_instruction_by_its_phase():
    batch = train_batches(1, 2, 0)[0]
    step = compile_train_step(tiny_model(seed=0), batch, optimizer=AdamWConfig())
    profile = step.simulate()
    assert len(profile.phases) == profile.timeline.columns()["n"]
    assert set(profile.phases) == {"forward", "backward", "optimizer"}
    fig = plot_step_timeline(profile)
    assert fig.axes[0].get_legend() is not None
    plt.close(fig)


def test_loss_curves_and_costs_draw_one_artist_per_series():
    fig = plot_loss_curves({"PyTorch": [3.0, 2.5, 2.0], "trnlab": [3.0, 2.5, 2.1]})
    assert len(fig.axes[0].lines) == 2
    plt.close(fig)
    rows = [TrainingEstimate(t, t, 10.0, 5, 0.1 * i, 0.2 * i, 0.01, 1.0, {"forward": .3, "backward": .6,
                                                                        "optimizer": .1}) for i, t in enumerate(("trn1", "trn2"), 1)]
    fig = plot_generation_costs(rows)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == 2
    plt.close(fig)
