"""The notebooks as a student meets them: stored files that open cleanly and offline, figures that
can be read, text that promises only what exists. (The same in a real browser: tests/browser/.)"""

from __future__ import annotations

import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from types import SimpleNamespace

from trnlab import NOTEBOOKS_DIR
from trnlab.course import execute
from trnlab.model import GPTConfig, layer_costs
from trnlab.viz import ladder as ladder_viz
from trnlab.viz import model_viz, roofline

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
# What JupyterLab writes for the ipykernel kernel; anything else is rewritten on opening, which marks
# the notebook modified although the student changed nothing.
JUPYTERLAB_KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
URL = re.compile(r"https?://[^\s\"'<>)]+")


def load(path):
    return json.loads(path.read_text())


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_stored_kernelspec_is_what_jupyterlab_writes(path):
    metadata = load(path)["metadata"]
    assert metadata["kernelspec"] == JUPYTERLAB_KERNELSPEC
    assert metadata["language_info"]["name"] == "python"


def test_course_execute_writes_jupyterlabs_kernelspec():
    assert execute.kernelspec_metadata() == JUPYTERLAB_KERNELSPEC


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_stored_outputs_work_offline(path):
    """No output or widget state loads anything from the network (CDN stylesheets, scripts, fonts)."""
    nb = load(path)
    outputs = json.dumps([c.get("outputs", []) for c in nb["cells"]]) + json.dumps(nb["metadata"])
    assert URL.findall(outputs) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_stored_notebook_stays_small(path):
    assert path.stat().st_size < 3e6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_widgets_say_run_first_instead_of_their_repr(path):
    """Before Run All JupyterLab shows a widget output's text: it must say what to do, and the
    notebook's introduction says it too."""
    nb = load(path)
    widget_outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]
                      if execute.WIDGET_VIEW in o.get("data", {})]
    for output in widget_outputs:
        assert "".join(output["data"]["text/plain"]) == execute.WIDGET_PLACEHOLDER
    if widget_outputs:
        intro = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert "Run the notebook first" in intro


def test_replace_widget_reprs_touches_only_widget_outputs():
    nb = SimpleNamespace(cells=[
        {"outputs": [{"data": {execute.WIDGET_VIEW: {"model_id": "x"}, "text/plain": "interactive(children=(...))"}},
                     {"data": {"text/plain": "42"}}]},
        {"cell_type": "markdown"},
    ])
    assert execute.replace_widget_reprs(nb) == 1
    assert nb.cells[0]["outputs"][0]["data"]["text/plain"] == execute.WIDGET_PLACEHOLDER
    assert nb.cells[0]["outputs"][1]["data"]["text/plain"] == "42"


def _widget_models(nb):
    return nb["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_widget_labels_are_not_cut_off(path):
    """ipywidgets gives a label 80 px unless told otherwise: about 10 characters, then "…"."""
    models = _widget_models(load(path))
    for model in models.values():
        state = model["state"]
        description = state.get("description", "")
        if len(description) <= 10 or model["model_name"] in ("ButtonModel",):
            continue
        style = models[state["style"].removeprefix("IPY_MODEL_")]["state"]
        assert style.get("description_width") not in ("", None), f"label {description!r} is cut off"


def test_course_map_marks_exactly_the_missing_notebooks_as_coming():
    """Notebook 00's course map is the one place that lists notebooks still to come."""
    existing = {p.name[:2] for p in NOTEBOOKS}
    course_map = next("".join(c["source"]) for c in load(NOTEBOOKS_DIR / "00_the_whole_chain.ipynb")["cells"]
                      if "## The course map" in "".join(c["source"]))
    rows = re.findall(r"^\| (\d\d) ([^|]*)\|", course_map, flags=re.M)
    assert rows
    for number, title in rows:
        assert ("*(coming)*" in title) == (number not in existing), f"notebook {number}: {title.strip()}"


def test_chain_picture_names_only_existing_notebooks(tmp_path):
    for name in ("00_a.ipynb", "01_b.ipynb", "03_c.ipynb", "04_d.ipynb"):
        (tmp_path / name).write_text("{}")
    assert model_viz.existing_notebooks(tmp_path) == {"00", "01", "03", "04"}
    assert model_viz.notebook_label(("03", "04", "05", "07"), {"00", "01", "03", "04"}) == "nb 03–04"
    assert model_viz.notebook_label(("03", "04", "07"), {"03", "04", "07"}) == "nb 03–04, 07"
    assert model_viz.notebook_label(("06",), {"00"}) == ""
    fig = model_viz.plot_chain(notebooks_dir=tmp_path)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "nb 01" in texts and "nb 03–04" in texts
    assert "06" not in texts and "09" not in texts


def test_animation_plays_offline():
    from trnlab.hardware import presets
    from trnlab.hardware.systolic import simulate_matmul
    from trnlab.viz import systolic

    rng = np.random.default_rng(0)
    spec = presets.TRN2.core.derive(pe_rows=2, pe_cols=2, matmul_min_cycles=1)
    trace = simulate_matmul(rng.integers(-2, 3, (2, 2)).astype(np.float32),
                            rng.integers(-2, 3, (2, 3)).astype(np.float32), spec)
    html = systolic.animate(trace, max_frames=3)
    assert URL.findall(html) == [] and "fa fa-" not in html
    assert "▶" in html and "data:image/png;base64" in html


def _boxes(fig, artists):
    renderer = fig.canvas.get_renderer()
    return [a.get_window_extent(renderer) for a in artists if a.get_text()]


def _overlapping(boxes) -> bool:
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _ladder_results():
    steps = ["2 tiled", "3 hoisted loads", "4 blocked free dims", "5 fully blocked"]
    dma, pe = [99.5, 92.3, 56.8, 14.7], [89.4, 96.4, 99.6, 89.8]
    return [SimpleNamespace(step=s, name=s, latency_us=l, active={"dma": d, "pe": p, "dve": 2.0}, mfu=p / 100)
            for s, l, d, p in zip(steps, [3909, 3624, 3511, 3894], dma, pe)]


def test_ladder_progress_legend_hides_no_point():
    fig = ladder_viz.plot_ladder_progress(_ladder_results())
    fig.canvas.draw()
    active_ax = fig.axes[1]
    legend = active_ax.get_legend().get_window_extent()
    assert not legend.overlaps(active_ax.get_window_extent())  # beside the plot, not on the data


def test_ladder_bar_value_labels_fit_inside_the_axes():
    fig = ladder_viz.plot_ladder_progress(_ladder_results())
    fig.canvas.draw()
    time_ax = fig.axes[0]
    top = time_ax.get_window_extent().y1
    assert all(box.y1 <= top for box in _boxes(fig, time_ax.texts))


@pytest.mark.parametrize("plot", ["ladder_progress", "active_comparison", "flops_by_kind"])
def test_x_labels_do_not_run_together(plot):
    if plot == "flops_by_kind":
        fig = model_viz.plot_flops_by_kind(layer_costs(GPTConfig()))
    elif plot == "ladder_progress":
        fig = ladder_viz.plot_ladder_progress(_ladder_results())
    else:
        fig = ladder_viz.plot_active_comparison(_ladder_results(), {"2 tiled": {"dma": 99.9, "pe": 87.3}})
    fig.canvas.draw()
    for ax in fig.axes:
        assert not _overlapping(_boxes(fig, ax.get_xticklabels()))


def test_layer_cost_legend_is_beside_the_bars():
    fig = model_viz.plot_layer_costs(layer_costs(GPTConfig()))
    fig.canvas.draw()
    params_ax = fig.axes[1]
    assert not params_ax.get_legend().get_window_extent().overlaps(params_ax.get_window_extent())


def test_roofline_legend_is_below_the_plot():
    fig = roofline.plot_roofline(19.7e12, 362e9, [("a", 50.0, 17e12), ("b", 341.0, 17.6e12)])
    fig.canvas.draw()
    ax = fig.axes[0]
    assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())
