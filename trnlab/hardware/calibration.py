"""Published device measurements the cost model is checked against, in two halves (docs/calibration.md).

Every row is one kernel run on one chip as a public page reports it: its source (a URL), the
conditions (kernel, shape, dtype, chip, what was measured) and the figures (latency in µs and/or
engine active %). The rows are split once, before comparing, into a **calibration** half (the
figures a constant of `presets.py` may be fitted to: the ones that were, and one row in two of each
source) and a **held-back** half (never fitted to: it says how well the model predicts).
`benchmarks/calibration_table.py` runs every row timing-only and writes ``notebooks/data/calibration.json``;
`load`, `format_table` and `plot_errors` show that file without running anything (notebook 05).

Targets (project issue 25): median latency error ≤ 10 % and none over 25 % per half, engine active %
within 5 points, and every lesson (the ratio between two variants of one source) on the same side
of 1 and within a factor of 1.5 of the published ratio.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

CALIBRATION, HELD_BACK = "calibration", "held-back"
LATENCY_TARGET_MEDIAN, LATENCY_TARGET_MAX, ACTIVE_TARGET_POINTS, LESSON_FACTOR = 0.10, 0.25, 5.0, 1.5

SOURCES = {
    "MM-trn1": "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/tutorials/"
               "matrix_multiplication.html (latency table; releases of 2024-2025)",
    "OPT-trn2": "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/how-to-guides/"
                "kernel-optimization.html (profiler engine-active table)",
    "CS149": "https://github.com/xaviergonzalez/asst4-trainium2/blob/main/writeup.md (a student's "
             "measurements, NCL P99 / profiler total_time) of https://github.com/stanford-cs149/asst4-trainium2 "
             "(README, part 1: kernels under skip_middle_end_transformations)",
    "CS149-student": "https://github.com/xaviergonzalez/asst4-trainium2 at d1552616 (2025-11-18): the same "
                     "student's own kernels (part1/kernels.py matrix_transpose, part2/conv2d.py "
                     "fused_conv2d_maxpool), run unmodified from that checkout; figures from its writeup.md "
                     "(run_benchmark.py and part 2's test_harness.py: NCL P99 on trn2)",
    "MAMBA": "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/tutorials/fused_mamba.html "
             "(page 'relevant for Inf2, Trn1, Trn1n'; device latency and VectorE active % of the "
             "profile's core execution period)",
    "AUTOTUNE": "https://github.com/awslabs/nki-autotune/blob/d57bcc3be3318f9cec05c7f48c162d3d2b1706e0/"
                ".claude/rules/learnings.md (trn2 MFU notes; conditions in the same commit's "
                "docs/superpowers/specs/2026-06-06-software-pipeline-tier-b-design.md, "
                "examples/tune_matmul_lhsT_rhs.py, kernel_library/README.md, and examples/attention.py "
                "at f9ca087ff3e5d5a999600064fb1ae5cea2d0e408)",
}


@dataclass(frozen=True)
class Row:
    """One published measurement: what ran, where, and what the page reports."""
    id: str                   # e.g. "cs149-rows-1"
    source: str               # a key of SOURCES
    kernel: str               # what ran (the published kernel's name and setting)
    shape: str
    dtype: str
    chip: str                 # "trn1" / "trn2": the preset it runs on
    measured: str             # what the page measured
    half: str                 # CALIBRATION or HELD_BACK
    why_half: str             # why the row is in its half
    latency_us: float | None = None
    active: dict = field(default_factory=dict)     # engine ("dma", "pe", "dve") -> %


def _mm(id, kernel, ms, half, why):
    return Row(id, "MM-trn1", kernel, "[4096, 8192] @ [8192, 8192]", "bf16", "trn1",
               "device latency, one NeuronCore of trn1.32xlarge", half, why, latency_us=ms * 1e3)


def _opt(id, kernel, active, half, why):
    return Row(id, "OPT-trn2", kernel, "[4096, 8192] @ [8192, 8192]", "fp32", "trn2",
               "neuron-profile engine active % (no latency published)", half, why, active=active)


def _cs(id, kernel, n, us, half, why, measured="NCL P99 latency (neuronx benchmark)"):
    return Row(id, "CS149", kernel, f"[{n}]", "fp32 (ASSUMED: the harness is not in the writeup)",
               "trn2", measured, half, why, latency_us=us)


def _student(id, kernel, shape, dtype, us, half, why):
    return Row(id, "CS149-student", kernel, shape, dtype, "trn2", "NCL P99 latency (neuronx benchmark)", half, why,
               latency_us=us)


CONV_SHAPE = "X [1, 256, 224, 224], W [256, 256, 3, 3], bias [256]"


def _mamba(id, kernel, channels, seq, us, dve, half, why):
    return Row(id, "MAMBA", kernel, f"batch 1, channels {channels}, seq {seq}, state 16", "fp32", "trn1",
               "device latency and VectorE active % (neuron-profile)", half, why, latency_us=us,
               active={"dve": dve})


# [AUTOTUNE]: MFU % on one trn2 NeuronCore, the tuner's formula: FLOPs / (time x 2 x 128 x 128 x 2.4 GHz)
# (78.6 TFLOPS bf16); the latency of a row is the one that MFU implies (FLOPs / (MFU x peak))
AUTOTUNE_PEAK_FLOPS = 2 * 128 * 128 * 2.4e9
MATMUL_2048_FLOPS = 2.0 * 2048 ** 3


def attention_flops(seq: int, d: int) -> float:
    """The tuner's FLOPs of causal attention: both matmuls over the whole S x S square (the masked half
    not subtracted), 2 x (2 x S x S x D): its `mac_count = 2 * seq_len * seq_len * d_k`."""
    return 4.0 * seq * seq * d


def _autotune(id, kernel, shape, flops, mfu, half, why, measured, active=None):
    return Row(id, "AUTOTUNE", kernel, shape, "bf16", "trn2", measured, half, why,
               latency_us=flops / (mfu / 100.0 * AUTOTUNE_PEAK_FLOPS) * 1e6, active=active or {})


def _autotune_mm(id, kernel, mfu, half, why, measured, active=None):
    return _autotune(id, kernel, "lhsT [2048, 2048], rhs [2048, 2048]", MATMUL_2048_FLOPS, mfu, half, why,
                     measured, active)


def _autotune_attention(id, seq, mfu, half, why):
    return _autotune(id, "nkilib attention_cte (AWS's NKI Library), causal_mask=True, no SPMD grid",
                     f"q [1, {seq}, 128], k [1, 128, {seq}], v [1, {seq}, 128]", attention_flops(seq, 128), mfu,
                     half, why, "MFU (full-square FLOPs, min device time of the tuner's benchmark, "
                     "compiled with linear-scan allocation and instruction scheduling off)")


ALTERNATE = "one row in two of its source, in the page's order"
ROWS: list[Row] = [
    _mm("mm-trn1-tiled", "matmul_tiled", 51.80, HELD_BACK, ALTERNATE),
    _mm("mm-trn1-hoisted", "matmul_hoisted", 42.96, CALIBRATION, "fitted dma_descriptor_ns (Trn1, 150 ns)"),
    _mm("mm-trn1-block-free", "matmul_block_free", 22.07, CALIBRATION, ALTERNATE),
    _mm("mm-trn1-fully-blocked", "matmul_fully_blocked", 6.97, HELD_BACK, ALTERNATE),
    _opt("opt-trn2-tiled", "matmul_tiled", {"dma": 99.93, "pe": 87.28}, HELD_BACK, ALTERNATE),
    _opt("opt-trn2-hoisted", "matmul_hoisted", {"dma": 99.73, "pe": 99.85}, CALIBRATION,
         "bounds dma_descriptor_ns (Trn2, <= 107 ns)"),
    _opt("opt-trn2-block-free", "matmul_block_free", {"dma": 95.70, "pe": 99.52}, HELD_BACK, ALTERNATE),
    _opt("opt-trn2-fully-blocked", "matmul_fully_blocked", {"dma": 21.54, "pe": 99.50, "dve": 10.55},
         CALIBRATION, "chose the tensor_tensor cost page (PSUM + SBUF: N cycles)"),
    _cs("cs149-rows-1", "vector_add_tiled, ROW_CHUNK 1", 25600, 37318, CALIBRATION, ALTERNATE),
    _cs("cs149-rows-128", "vector_add_tiled, ROW_CHUNK 128", 25600, 378, HELD_BACK, ALTERNATE),
    _cs("cs149-stream-2", "vector_add_stream, FREE_DIM 2", 25600, 186, CALIBRATION, ALTERNATE),
    _cs("cs149-stream-200", "vector_add_stream, FREE_DIM 200", 25600, 15, HELD_BACK, ALTERNATE),
    _cs("cs149-stream-2000", "vector_add_stream, FREE_DIM 2000", 256000, 28, CALIBRATION, ALTERNATE,
        "neuron-profile total_time"),
    _cs("cs149-stream-1000", "vector_add_stream, FREE_DIM 1000", 256000, 26, HELD_BACK, ALTERNATE,
        "neuron-profile total_time"),
    # the student's own kernels, in the writeup's order: part 1's transpose, part 2's fused conv2d + maxpool
    _student("cs149-transpose", "matrix_transpose (the student's)", "[1024, 1024]", "fp32", 86, CALIBRATION,
             ALTERNATE),
    _student("cs149-conv-fp32", "fused_conv2d_maxpool (the student's), pool_size 1", CONV_SHAPE, "fp32", 3832,
             HELD_BACK, ALTERNATE),
    _student("cs149-conv-fp16", "fused_conv2d_maxpool (the student's), pool_size 1", CONV_SHAPE, "fp16", 824,
             CALIBRATION, ALTERNATE),
    _student("cs149-pool-fp32", "fused_conv2d_maxpool (the student's), pool_size 2", CONV_SHAPE, "fp32", 3830,
             HELD_BACK, ALTERNATE),
    _student("cs149-pool-fp16", "fused_conv2d_maxpool (the student's), pool_size 2", CONV_SHAPE, "fp16", 825,
             CALIBRATION, ALTERNATE),
    _mamba("mamba-v1-c256", "mamba_v1", 256, 512, 172.93, 98.71, CALIBRATION, ALTERNATE),
    _mamba("mamba-v1-c4096", "mamba_v1", 4096, 512, 2340, 92.16, HELD_BACK, ALTERNATE),
    _mamba("mamba-v2-c4096", "mamba_v2", 4096, 512, 1610, 99.63, CALIBRATION, ALTERNATE),
    _mamba("mamba-v2-s8192", "mamba_v2 (the chip spills)", 4096, 8192, 53330, 58.93, HELD_BACK, ALTERNATE),
    _mamba("mamba-v3-s8192", "mamba_v3", 4096, 8192, 27800, 94.85, CALIBRATION, ALTERNATE),
    # [AUTOTUNE], in the notes' order: the matmul ladder 59.6 -> 83.4 % (SoftwarePipeline), the hand
    # kernel's 90.92 %, then the NKI Library's attention_cte at 2k / 16k tokens (30 / 46 %)
    _autotune_mm("autotune-mm-single", "matmul_psum_single", 59.6, CALIBRATION, ALTERNATE,
                 "profiler MFU (total_time 0.000366 s); TensorE / VectorE active % of the design spec's "
                 "profile of the same kernel (59.6 % MFU)", active={"pe": 72.3, "dve": 18.2}),
    _autotune_mm("autotune-mm-rotating", "matmul_psum_rotating", 83.4, HELD_BACK, ALTERNATE,
                 "profiler MFU (total_time 0.000262 s); TensorE active % of the design spec's profile of "
                 "the same kernel (rotate_only, 82.9 % MFU in that run)", active={"pe": 87.8}),
    _autotune_mm("autotune-mm-hand", "matmul_hand_blocked", 90.92, CALIBRATION, ALTERNATE,
                 "MFU from the min device time of the tuner's benchmark, compiled with linear-scan "
                 "allocation and instruction scheduling off"),
    _autotune_attention("autotune-attn-2k", 2048, 30.0, HELD_BACK, ALTERNATE),
    _autotune_attention("autotune-attn-16k", 16384, 46.0, CALIBRATION, ALTERNATE),
]

# (slower row, faster row): the lesson is published / published of the two latencies
LESSONS: list[tuple[str, str]] = [
    ("mm-trn1-tiled", "mm-trn1-hoisted"), ("mm-trn1-hoisted", "mm-trn1-block-free"),
    ("mm-trn1-block-free", "mm-trn1-fully-blocked"),
    ("cs149-rows-1", "cs149-rows-128"), ("cs149-rows-128", "cs149-stream-2"),
    ("cs149-stream-2", "cs149-stream-200"), ("cs149-stream-2000", "cs149-stream-1000"),
    ("cs149-conv-fp32", "cs149-conv-fp16"), ("cs149-pool-fp32", "cs149-pool-fp16"),
    ("mamba-v1-c4096", "mamba-v2-c4096"), ("mamba-v2-s8192", "mamba-v3-s8192"),
    ("mamba-v1-c4096", "mamba-v1-c256"),
    ("autotune-mm-single", "autotune-mm-rotating"), ("autotune-mm-rotating", "autotune-mm-hand"),
    ("autotune-attn-16k", "autotune-attn-2k"),
]

BY_ID = {row.id: row for row in ROWS}


def result(row: Row, latency_us: float | None, active: dict, note: str = "") -> dict:
    """One row of the JSON: the published figures, ours, and the errors."""
    out = {"id": row.id, "source": row.source, "url": SOURCES[row.source], "kernel": row.kernel,
           "shape": row.shape, "dtype": row.dtype, "chip": row.chip, "measured": row.measured,
           "half": row.half, "why_half": row.why_half, "published_us": row.latency_us,
           "ours_us": latency_us, "latency_error": None, "active": {}, "note": note}
    if row.latency_us is not None and latency_us is not None:
        out["latency_error"] = latency_us / row.latency_us - 1.0
    for engine, theirs in row.active.items():
        ours = active.get(engine)
        out["active"][engine] = {"published": theirs, "ours": ours,
                                 "points": None if ours is None else ours - theirs}
    return out


def summary(results: list[dict]) -> dict:
    """Per half: rows, median and max |latency error|, max |active points|, and targets met or not."""
    halves = {}
    for half in (CALIBRATION, HELD_BACK):
        rows = [r for r in results if r["half"] == half]
        errors = [abs(r["latency_error"]) for r in rows if r["latency_error"] is not None]
        points = [abs(a["points"]) for r in rows for a in r["active"].values() if a["points"] is not None]
        halves[half] = {
            "rows": len(rows), "latency_rows": len(errors),
            "median_latency_error": statistics.median(errors) if errors else None,
            "max_latency_error": max(errors) if errors else None,
            "over_25_percent": sum(e > LATENCY_TARGET_MAX for e in errors),
            "active_figures": len(points), "max_active_points": max(points) if points else None,
            "active_within_5_points": sum(p <= ACTIVE_TARGET_POINTS for p in points),
        }
    return halves


def lessons(results: list[dict]) -> list[dict]:
    """Each lesson: the published speed-up of one variant over another and ours, and whether it holds."""
    by_id = {r["id"]: r for r in results}
    out = []
    for slow, fast in LESSONS:
        a, b = by_id.get(slow), by_id.get(fast)
        if not a or not b or None in (a["ours_us"], b["ours_us"]):
            continue
        published = a["published_us"] / b["published_us"]
        ours = a["ours_us"] / b["ours_us"]
        factor = ours / published
        out.append({"slower": slow, "faster": fast, "published": published, "ours": ours, "factor": factor,
                     "same_order": (ours > 1) == (published > 1),
                     "holds": (ours > 1) == (published > 1) and 1 / LESSON_FACTOR <= factor <= LESSON_FACTOR})
    return out


def save(results: list[dict], path: str | Path) -> None:
    """Write the rows, the per-half summary and the lessons (what `load` reads)."""
    payload = {"rows": results, "summary": summary(results), "lessons": lessons(results)}
    Path(path).write_text(json.dumps(payload, indent=1) + "\n")


def load(path: str | Path) -> dict:
    """The JSON `save` wrote: {"rows": [...], "summary": {...}, "lessons": [...]}."""
    return json.loads(Path(path).read_text())


def _pct(x, sign: bool = True):
    if x is None:
        return "–"
    text = f"{100 * x:+.0f} %" if sign else f"{100 * x:.0f} %"
    return text.replace("-0 %", "+0 %")


def _us(x):
    return "–" if x is None else (f"{x / 1e3:,.2f} ms" if x >= 1e4 else f"{x:,.1f} µs")


def format_table(data: dict) -> str:
    """Markdown: every row (ours vs published, the error, the half), the per-half summary, the lessons."""
    lines = ["| row | chip, dtype | published | ours | error | engine active % published / ours | half |",
             "|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        active = ", ".join(f"{e} {a['published']:.1f} / " + ("–" if a["ours"] is None else f"{a['ours']:.1f}")
                           for e, a in r["active"].items()) or "–"
        lines.append(f"| {r['id']} | {r['chip']}, {r['dtype'].split(' ')[0]} | {_us(r['published_us'])} | "
                     f"{_us(r['ours_us'])} | {_pct(r['latency_error'])} | {active} | {r['half']} |")
    lines += ["", "| half | rows | median \\|latency error\\| | max | over 25 % | active figures within 5 points |",
              "|---|---|---|---|---|---|"]
    for half, s in data["summary"].items():
        lines.append(f"| {half} | {s['rows']} | {_pct(s['median_latency_error'], False)} | {_pct(s['max_latency_error'], False)} | "
                     f"{s['over_25_percent']} of {s['latency_rows']} | "
                     f"{s['active_within_5_points']} of {s['active_figures']} |")
    lines += ["", "| lesson (slower / faster) | published | ours | ours / published | holds |", "|---|---|---|---|---|"]
    for x in data["lessons"]:
        lines.append(f"| {x['slower']} / {x['faster']} | {x['published']:.2f}× | {x['ours']:.2f}× | "
                     f"{x['factor']:.2f} | {'yes' if x['holds'] else 'no'} |")
    return "\n".join(lines)


def plot_errors(data: dict):
    """A bar per row: latency error (%) coloured by half, with the ±25 % band; returns the Figure."""
    import matplotlib.pyplot as plt     # only the picture needs it
    rows = [r for r in data["rows"] if r["latency_error"] is not None]
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(rows) + 1.2))
    colours = {CALIBRATION: "#4e79a7", HELD_BACK: "#f28e2b"}
    ax.barh([r["id"] for r in rows], [100 * r["latency_error"] for r in rows],
            color=[colours[r["half"]] for r in rows])
    ax.axvspan(-100 * LATENCY_TARGET_MAX, 100 * LATENCY_TARGET_MAX, color="0.92", zorder=0)
    ax.axvline(0, color="0.3", linewidth=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("trnlab latency vs published (%)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
              labels=list(colours), loc="lower right")
    fig.tight_layout()
    return fig
