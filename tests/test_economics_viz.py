"""The pictures and the calculator widget of notebook 10 draw on small inputs and show what they claim."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from trnlab.economics import cost, figures, fit, simulated  # noqa: E402
from trnlab.viz import generations  # noqa: E402

ACC = figures.default_accelerators()
SYSTEMS = figures.default_systems()


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _labels(fig):
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def test_rooflines_mark_gpus_as_datasheet_only_and_dashed():
    fig = generations.plot_chip_rooflines(ACC, ops=fit.forward_ops(fit.MODELS["GPT-2 small"], 2))
    labels = _labels(fig)
    assert sum("datasheet only" in text for text in labels) == 2
    styles = {line.get_label(): line.get_linestyle() for line in fig.axes[0].get_lines() if "TFLOPS" in line.get_label()}
    assert all((style == "--") == ("datasheet" in label) for label, style in styles.items())


def test_generation_bars_hatch_estimated_and_assumed_power():
    fig = generations.plot_generations(ACC)
    hatches = [p.get_hatch() for p in fig.axes[3].patches]
    assert hatches == ["xx", "//", "//", None, None] or hatches == ["xx", "//", "//", "", ""]


def test_estimate_and_claim_plots_draw():
    generations.plot_estimates(cost.compare(1e21, SYSTEMS))
    fig = generations.plot_cost_claim(SYSTEMS["trn1.32xlarge"], SYSTEMS["p4d.24xlarge (2022)"], 0.5)
    assert "equal MFU: 0.54×" in [t.get_text() for t in fig.axes[0].texts]
    generations.plot_efficiency_claim(SYSTEMS["Trn3 UltraServer (Gen2)"], SYSTEMS["Trn2 UltraServer"], 4.0)
    generations.plot_ultraservers(SYSTEMS, ["trn2.48xlarge", "Trn2 UltraServer", "Trn3 UltraServer (Gen2)"])


def test_step_plot_labels_the_roofline_estimate():
    tiny = fit.GPTConfig(vocab_size=20, block_size=16, n_layer=1, n_head=2, n_embd=32)
    results = simulated.simulate_generations(tiny, batch=2)
    fig = generations.plot_step_times(results, "decode", top=20)
    assert any("(roofline)" in text for text in _labels(fig))


def test_calculator_widget_recomputes_when_a_price_changes():
    systems = figures.default_systems()
    widget = generations.calculator_widget(systems, params=1e8)
    prices = widget.children[0].children[1].children[1:]
    box = next(b for b in prices if b.description == "trn1.32xlarge")
    assert "official" in box.tooltip
    box.value = 10.0
    assert systems["trn1.32xlarge"].price.value == 10.0


def test_fit_report_plot_shows_memory_per_chip():
    rows = fit.fit_report(fit.MODELS["GPT-3 6.7B"], tokens=1e11, batch=1)
    fig = generations.plot_fit_report(rows)
    assert any("GiB /" in t.get_text() for t in fig.axes[0].texts)
