"""Pictures of notebook 10: Trn1 → Trn2 → Trn3 side by side, rooflines with a reference GPU, what a
model costs on each, what the claims need, and the calculator widget with editable prices and power.

The GPU lines are drawn from datasheet figures only (a roofline, not a simulation) and are dashed.

    plot_generations(default_accelerators())
    plot_chip_rooflines(default_accelerators(), ops=forward_ops(config, batch=8))
    plot_estimates(compare(flops, default_systems()))
    calculator_widget()
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from trnlab.economics.claims import cost_ratio, efficiency_ratio
from trnlab.economics.cost import TYPICAL_MFU, Estimate, compare, training_flops
from trnlab.economics.figures import ASSUMED, Accelerator, Sourced, System, default_systems
from trnlab.economics.fit import OpTraffic
from trnlab.viz.roofline import attainable_flops

TRAINIUM_COLORS = {"trn1": "#9ecae1", "trn2": "#4292c6", "trn3": "#08519c"}
GPU_COLOR = "#e6550d"
STATUS_HATCH = {"official": "", "third-party estimate": "//", "assumed": "xx"}


def _color(acc: Accelerator) -> str:
    return TRAINIUM_COLORS.get(acc.preset, GPU_COLOR) if acc.preset else GPU_COLOR


def _short(name: str) -> str:
    return name.replace("NVIDIA ", "").replace(" SXM4 40GB", "").replace(" SXM5 80GB", "")


def plot_generations(accelerators: dict[str, Accelerator], keys: Sequence[str] = ("trn1", "trn2", "trn3", "a100", "h100")
                     ) -> Figure:
    """One chip per generation, side by side: peak (bf16 and fp8), HBM size, HBM bandwidth, power.

    Power bars are hatched where the figure is an estimate (//) or an assumption (xx)."""
    accs = [accelerators[k] for k in keys if k in accelerators]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
    names = [_short(a.name).replace(" (", "\n(") for a in accs]
    x = np.arange(len(accs))
    colors = [_color(a) for a in accs]
    bf16 = [a.peak_flops.get("bf16", 0) / 1e12 for a in accs]
    fp8 = [a.peak_flops.get("fp8", 0) / 1e12 for a in accs]
    axes[0].bar(x - 0.2, bf16, 0.4, color=colors, label="bf16")
    axes[0].bar(x + 0.2, fp8, 0.4, color=colors, alpha=0.5, hatch="..", label="fp8 (Trn3: MXFP8)")
    axes[0].set_title("dense peak per chip (TFLOPS)", fontsize=9)
    axes[0].legend(fontsize=7)
    axes[1].bar(x, [a.hbm_bytes / 2**30 for a in accs], color=colors)
    axes[1].set_title("HBM per chip (GiB)", fontsize=9)
    axes[2].bar(x, [a.hbm_bandwidth / 1e12 for a in accs], color=colors)
    axes[2].set_title("HBM bandwidth per chip (TB/s)", fontsize=9)
    for i, a in enumerate(accs):
        axes[3].bar(i, a.power.value, color=colors[i], hatch=STATUS_HATCH[a.power.status], edgecolor="#333333")
    axes[3].set_title("power per chip (W)\n// estimate, xx assumed", fontsize=9)
    for ax in axes:
        ax.set_xticks(x, names, fontsize=6.5)
    fig.tight_layout()
    return fig


def plot_chip_rooflines(accelerators: dict[str, Accelerator], dtype: str = "bf16",
                        ops: Sequence[OpTraffic] = (), keys: Sequence[str] = ("trn1", "trn2", "trn3", "a100", "h100"),
                        ax: plt.Axes | None = None) -> Figure:
    """Whole-chip rooflines; GPUs dashed (datasheet peak and bandwidth only). With `ops`, each op's
    arithmetic intensity is marked on the x axis (grey ticks; the heaviest ops labelled)."""
    accs = [accelerators[k] for k in keys if k in accelerators and dtype in accelerators[k].peak_flops]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.4))
    ridges = [a.ridge(dtype) for a in accs]
    finite = [op.intensity for op in ops if 0 < op.intensity < np.inf]
    x = np.geomspace(min([min(ridges) / 200, *finite]) / 2, max([max(ridges) * 30, *finite]) * 2, 300)
    for a, ridge in zip(accs, ridges):
        peak = a.peak(dtype)
        ax.loglog(x, attainable_flops(x, peak, a.hbm_bandwidth) / 1e12, lw=2, color=_color(a),
                  ls="-" if a.simulated else "--",
                  label=f"{_short(a.name)}: {peak / 1e12:.0f} TFLOPS, {a.hbm_bandwidth / 1e12:.2f} TB/s, "
                        f"ridge {ridge:.0f}" + ("" if a.simulated else " (datasheet only)"))
        ax.plot(ridge, peak / 1e12, "o", color=_color(a), ms=4)
    if ops:
        heaviest = sorted(ops, key=lambda o: o.flops, reverse=True)
        labelled = {}
        for op in heaviest:
            if 0 < op.intensity < np.inf:
                ax.axvline(op.intensity, ymax=0.06, color="#777777", lw=1)
                kind = op.name.rsplit(".", 1)[-1]
                if kind not in labelled and len(labelled) < 6:
                    labelled[kind] = op.intensity
        # ops of nearly the same intensity share one label, so names never sit on top of each other
        groups: list[list] = []
        for kind, intensity in sorted(labelled.items(), key=lambda kv: kv[1]):
            if groups and intensity < groups[-1][-1][1] * 1.6:
                groups[-1].append((kind, intensity))
            else:
                groups.append([(kind, intensity)])
        for i, group in enumerate(groups):
            at = float(np.exp(np.mean([np.log(x) for _, x in group])))
            ax.annotate(", ".join(k for k, _ in group), (at, ax.get_ylim()[0]), xytext=(0, 14 + 10 * (i % 2)),
                        textcoords="offset points", fontsize=7, color="#444444", ha="center")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel(f"attainable TFLOPS per chip ({dtype})")
    ax.set_title("one chip per generation on the roofline (GPUs: datasheet roofline, not simulated)", fontsize=9)
    ax.legend(fontsize=6.5, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure


def plot_estimates(estimates: Sequence[Estimate], title: str = "") -> Figure:
    """Hours, dollars and kWh to train the same FLOPs on each system (one instance each)."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    names = [e.system for e in estimates]
    y = np.arange(len(names))
    for ax, (what, values) in zip(axes, [("hours (one instance)", [e.hours for e in estimates]),
                                         ("USD", [e.usd for e in estimates]),
                                         ("kWh (chips only)", [e.kwh for e in estimates])]):
        colors = [GPU_COLOR if n.startswith("p") else "#4292c6" for n in names]
        ax.barh(y, values, color=colors)
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:,.3g}", va="center", fontsize=7)
        ax.set_yticks(y, names if ax is axes[0] else [""] * len(names), fontsize=7)
        ax.set_title(what, fontsize=9)
        ax.invert_yaxis()
        ax.margins(x=0.25)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_cost_claim(subject: System, baseline: System, claimed_ratio: float = 0.5,
                    mfu_baseline: float = TYPICAL_MFU, dtype: str = "bf16", ax: plt.Axes | None = None) -> Figure:
    """Cost ratio subject / baseline against the subject's MFU, with the claimed ratio as a line:
    the claim holds where the curve is below the line."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.6))
    mfus = np.linspace(0.05, 1.0, 200)
    ratios = [cost_ratio(subject, baseline, m, mfu_baseline, dtype) for m in mfus]
    ax.plot(100 * mfus, ratios, color="#4292c6", lw=2, label=f"{subject.name} / {baseline.name}")
    ax.axhline(claimed_ratio, color="#d62728", ls="--", lw=1, label=f"claimed: {claimed_ratio:g}× the cost")
    ax.axvline(100 * mfu_baseline, color="#999999", ls=":", lw=1)
    equal = cost_ratio(subject, baseline, mfu_baseline, mfu_baseline, dtype)
    ax.plot(100 * mfu_baseline, equal, "o", color="#4292c6")
    ax.annotate(f"equal MFU: {equal:.2f}×", (100 * mfu_baseline, equal), xytext=(8, 8),
                textcoords="offset points", fontsize=8)
    ax.set_ylim(0, max(2.0, claimed_ratio * 1.5))
    ax.set_xlabel(f"MFU of {subject.name} (%), baseline at {100 * mfu_baseline:.0f} %")
    ax.set_ylabel("cost to train, subject / baseline")
    ax.set_title(f"when is {subject.name} {100 * (1 - claimed_ratio):.0f} % cheaper to train?", fontsize=9)
    ax.legend(fontsize=7)
    ax.figure.tight_layout()
    return ax.figure


def plot_efficiency_claim(subject: System, baseline: System, claimed_ratio: float, dtype: str = "fp8",
                          mfu_baseline: float = TYPICAL_MFU, ax: plt.Axes | None = None) -> Figure:
    """Energy-efficiency ratio against the subject's power per chip, at equal MFU and at 2× the MFU."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.6))
    watts = np.linspace(200, 1400, 200)
    for factor, style in ((1.0, "-"), (2.0, "-.")):
        ratios = []
        for w in watts:
            swept = replace(subject.accelerator, power=Sourced(w, "W", "swept", ASSUMED))
            s = replace(subject, accelerator=swept)
            ratios.append(efficiency_ratio(s, baseline, min(1.0, factor * mfu_baseline), mfu_baseline, dtype))
        ax.plot(watts, ratios, style, color="#08519c", lw=2, label=f"subject at {factor:g}× the baseline's MFU")
    ax.axhline(claimed_ratio, color="#d62728", ls="--", lw=1, label=f"claimed {claimed_ratio:g}×")
    ax.axvline(subject.accelerator.power.value, color="#999999", ls=":", lw=1)
    ax.text(subject.accelerator.power.value, ax.get_ylim()[1] * 0.9, f" estimate in use\n {subject.accelerator.power.value:.0f} W",
            fontsize=7, va="top")
    ax.set_xlabel(f"power per {subject.accelerator.name} chip (W)")
    ax.set_ylabel(f"FLOPs per joule, subject / {baseline.accelerator.name}")
    ax.set_title(f"what a {claimed_ratio:g}× efficiency claim needs ({dtype})", fontsize=9)
    ax.legend(fontsize=7)
    ax.figure.tight_layout()
    return ax.figure


def plot_ultraservers(systems: dict[str, System], names: Sequence[str]) -> Figure:
    """Servers and UltraServers from the presets: chips, peak PFLOPS (bf16, fp8) and HBM, side by side."""
    rows = [systems[n] for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    y = np.arange(len(rows))
    colors = [_color(s.accelerator) for s in rows]
    axes[0].barh(y, [s.chips for s in rows], color=colors)
    axes[0].set_title("chips", fontsize=9)
    axes[1].barh(y - 0.2, [s.peak("bf16") / 1e15 for s in rows], 0.4, color=colors, label="bf16")
    axes[1].barh(y + 0.2, [s.peak("fp8") / 1e15 for s in rows], 0.4, color=colors, alpha=0.5, hatch="..", label="fp8")
    axes[1].set_title("dense peak (PFLOPS)", fontsize=9)
    axes[1].legend(fontsize=7)
    axes[2].barh(y, [s.hbm_bytes / 2**40 for s in rows], color=colors)
    axes[2].set_title("HBM (TiB)", fontsize=9)
    for ax in axes:
        ax.set_yticks(y, [s.name for s in rows] if ax is axes[0] else [""] * len(rows), fontsize=7)
        ax.invert_yaxis()
    fig.tight_layout()
    return fig


def plot_step_times(results: dict[str, dict], phase: str = "train", top: int = 7) -> Figure:
    """Simulated step time on one core per generation, stacked by the kernels that take longest."""
    targets = list(results)
    steps = [results[t][phase] for t in targets]
    totals: dict[str, float] = {}
    for step in steps:
        for label, us in step.by_label().items():
            totals[label] = totals.get(label, 0.0) + us
    labels = sorted(totals, key=totals.get, reverse=True)[:top]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    bottom = np.zeros(len(targets))
    cmap = plt.get_cmap("tab10")
    for i, label in enumerate(labels + ["other"]):
        values = np.array([s.by_label().get(label, 0.0) if label != "other"
                           else s.core_us - sum(s.by_label().get(lab, 0.0) for lab in labels) for s in steps])
        axes[0].bar(targets, values, bottom=bottom, color=cmap(i % 10), label=label + (
            " (roofline)" if any(k.roofline and k.label == label for s in steps for k in s.kernels) else ""))
        bottom += values
    axes[0].set_ylabel("µs on one NeuronCore")
    axes[0].set_title(f"simulated {phase} step, one core", fontsize=9)
    axes[0].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    per_chip = [s.chip_tokens_per_s / 1e3 for s in steps]
    axes[1].bar(targets, per_chip, color=[TRAINIUM_COLORS.get(t, "#777777") for t in targets])
    for i, v in enumerate(per_chip):
        axes[1].text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
    axes[1].set_ylabel("thousand tokens/s per chip")
    axes[1].set_title("whole chip: every core runs its own copy", fontsize=9)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# the calculator widget
# ---------------------------------------------------------------------------------------------
def calculator_widget(systems: dict[str, System] | None = None, params: float = 124e6, tokens: float | None = None):
    """Cost and energy calculator: model size, tokens, MFU, dtype, and every price and power editable.

    Each price and power box starts at its default and says where it comes from (its tooltip and the
    table under the widget). Returns the widget (display it as the last line of a cell)."""
    import ipywidgets as widgets

    systems = systems or default_systems()
    names = list(systems)
    params_box = widgets.FloatLogSlider(value=params, base=10, min=5, max=12, step=0.05, description="params N",
                                        continuous_update=False, readout_format=".3g")
    tokens_box = widgets.FloatLogSlider(value=tokens or 20 * params, base=10, min=6, max=14, step=0.05,
                                        description="tokens D", continuous_update=False, readout_format=".3g")
    mfu_box = widgets.FloatSlider(value=TYPICAL_MFU, min=0.05, max=1.0, step=0.01, description="MFU",
                                  continuous_update=False)
    dtype_box = widgets.Dropdown(options=["bf16", "fp8"], value="bf16", description="precision")
    price_boxes = {n: widgets.BoundedFloatText(value=round(s.price.value, 2), min=0.01, max=1e5, step=0.5,
                                               description=n, tooltip=s.price.label(),
                                               style={"description_width": "170px"},
                                               layout=widgets.Layout(width="290px"))
                   for n, s in systems.items()}
    accs = {s.accelerator.name: s.accelerator for s in systems.values()}
    power_boxes = {a: widgets.BoundedFloatText(value=acc.power.value, min=1, max=5000, step=10,
                                               description=_short(a) + " W", tooltip=acc.power.label(),
                                               style={"description_width": "170px"},
                                               layout=widgets.Layout(width="290px"))
                   for a, acc in accs.items()}
    out = widgets.Output()

    def update(*_):
        for n, box in price_boxes.items():
            systems[n].price.value = box.value
        for a, box in power_boxes.items():
            accs[a].power.value = box.value
        flops = training_flops(params_box.value, tokens_box.value)
        estimates = compare(flops, [systems[n] for n in names], mfu_box.value, dtype_box.value)
        with out:
            out.clear_output(wait=True)
            print(f"6·N·D = {flops:.3g} FLOPs at {100 * mfu_box.value:.0f} % MFU ({dtype_box.value}); "
                  f"one instance each, cheapest first")
            for e in estimates:
                print(f"  {e.system:26s} {e.hours:12,.1f} h  ${e.usd:14,.0f}  {e.kwh:12,.0f} kWh")
            plot_estimates(estimates)
            plt.show()

    for box in [params_box, tokens_box, mfu_box, dtype_box, *price_boxes.values(), *power_boxes.values()]:
        box.observe(update, names="value")
    sources = widgets.HTML("<small>" + "<br>".join(
        f"<b>{n}</b>: {s.price.label()}" for n, s in systems.items()) + "<br>" + "<br>".join(
        f"<b>{_short(a)}</b>: {acc.power.label()}" for a, acc in accs.items()) + "</small>")
    update()
    return widgets.VBox([
        widgets.HBox([widgets.VBox([params_box, tokens_box, mfu_box, dtype_box]),
                      widgets.VBox([widgets.Label("price, USD per hour"), *price_boxes.values()]),
                      widgets.VBox([widgets.Label("power per chip"), *power_boxes.values()])]),
        out, sources])


def plot_fit_report(rows: Sequence, title: str = "") -> Figure:
    """A `fit.fit_report`: chips whose HBM holds the training state, the roofline's MFU bound against
    the MFU used, and the dollars to train, per system."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    names = [r.system for r in rows]
    y = np.arange(len(rows))
    colors = [GPU_COLOR if n.startswith("p") else "#4292c6" for n in names]
    axes[0].barh(y, [r.chips_for_memory for r in rows], color=colors)
    for i, r in enumerate(rows):
        axes[0].text(r.chips_for_memory, i, f" {r.training_gib:,.0f} GiB / {r.hbm_per_chip_gib:.0f} per chip",
                     va="center", fontsize=7)
    axes[0].set_title("chips to hold the training state", fontsize=9)
    axes[1].barh(y - 0.2, [100 * r.roofline_mfu for r in rows], 0.4, color="#cccccc", label="roofline bound")
    axes[1].barh(y + 0.2, [100 * r.mfu_used for r in rows], 0.4, color=colors, label="MFU used")
    axes[1].set_title("MFU (%)", fontsize=9)
    axes[1].legend(fontsize=7, loc="lower right")
    axes[2].barh(y, [r.estimate.usd for r in rows], color=colors)
    for i, r in enumerate(rows):
        axes[2].text(r.estimate.usd, i, f" ${r.estimate.usd:,.0f}, {r.estimate.hours:,.1f} h", va="center", fontsize=7)
    axes[2].set_title("USD to train (one instance)", fontsize=9)
    for ax in axes:
        ax.set_yticks(y, names if ax is axes[0] else [""] * len(names), fontsize=7)
        ax.invert_yaxis()
        ax.margins(x=0.45)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
