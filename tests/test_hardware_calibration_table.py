"""The calibration table (docs/calibration.md): published rows well-formed, halves fixed, the renderer reads the JSON.

No timing here (benchmarks/calibration_table.py measures); these check the data and the arithmetic.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from trnlab.hardware import calibration as cal

JSON_PATH = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "calibration.json"


def test_every_row_names_its_source_conditions_and_half():
    assert len(cal.ROWS) >= 10
    assert len({r.id for r in cal.ROWS}) == len(cal.ROWS)
    for row in cal.ROWS:
        assert row.source in cal.SOURCES and cal.SOURCES[row.source].startswith("https://")
        assert row.kernel and row.shape and row.dtype and row.measured and row.why_half
        assert row.chip in ("trn1", "trn2")
        assert row.half in (cal.CALIBRATION, cal.HELD_BACK)
        assert row.latency_us is not None or row.active, f"{row.id} publishes no figure"
        assert all(engine in ("dma", "pe", "dve") and 0 <= pct <= 100 for engine, pct in row.active.items())


def test_both_halves_hold_latency_rows_and_every_source_is_split():
    for half in (cal.CALIBRATION, cal.HELD_BACK):
        assert sum(r.half == half and r.latency_us is not None for r in cal.ROWS) >= 5
    for source in cal.SOURCES:
        halves = {r.half for r in cal.ROWS if r.source == source}
        assert halves == {cal.CALIBRATION, cal.HELD_BACK}, f"{source} is not split between the halves"


def test_the_rows_that_fitted_a_constant_are_in_the_calibration_half():
    # docs/calibration.md: dma_descriptor_ns was fitted on the Trn1 hoisted latency, bounded by Trn2's
    assert cal.BY_ID["mm-trn1-hoisted"].half == cal.CALIBRATION
    assert cal.BY_ID["opt-trn2-hoisted"].half == cal.CALIBRATION


def test_lessons_pair_rows_of_one_source_with_published_latencies():
    for slow, fast in cal.LESSONS:
        a, b = cal.BY_ID[slow], cal.BY_ID[fast]
        assert a.source == b.source and a.latency_us and b.latency_us


def _fake_results():
    # ours = published × a known factor: the errors and ratios follow by arithmetic
    results = []
    for i, row in enumerate(cal.ROWS):
        ours_us = None if row.latency_us is None else row.latency_us * (1.2 if i % 2 else 0.9)
        results.append(cal.result(row, ours_us, {e: p - 3.0 for e, p in row.active.items()}))
    return results


def test_errors_summary_and_lessons_are_computed_from_the_figures():
    results = _fake_results()
    s = cal.summary(results)
    for half in (cal.CALIBRATION, cal.HELD_BACK):
        assert s[half]["max_latency_error"] in (pytest.approx(0.2), pytest.approx(0.1))
        assert s[half]["over_25_percent"] == 0
        assert s[half]["active_within_5_points"] == s[half]["active_figures"]
    by_id = {r["id"]: r for r in results}
    for lesson in cal.lessons(results):
        a, b = by_id[lesson["slower"]], by_id[lesson["faster"]]
        assert lesson["ours"] == pytest.approx(a["ours_us"] / b["ours_us"])
        assert lesson["holds"] == (lesson["same_order"] and 1 / 1.5 <= lesson["factor"] <= 1.5)


def test_the_renderer_works_from_the_json(tmp_path):
    path = tmp_path / "calibration.json"
    cal.save(_fake_results(), path)
    data = cal.load(path)
    table = cal.format_table(data)
    assert all(row.id in table for row in cal.ROWS)
    assert cal.CALIBRATION in table and cal.HELD_BACK in table


def test_the_error_plot_has_a_bar_per_latency_row(tmp_path):
    pytest.importorskip("matplotlib")     # the NumPy-only core's tests run without it
    path = tmp_path / "calibration.json"
    cal.save(_fake_results(), path)
    fig = cal.plot_errors(cal.load(path))
    assert len(fig.axes[0].patches) >= sum(r.latency_us is not None for r in cal.ROWS)


def test_the_committed_json_matches_the_rows():
    data = json.loads(JSON_PATH.read_text())
    assert [r["id"] for r in data["rows"]] == [row.id for row in cal.ROWS]
    for r in data["rows"]:
        row = cal.BY_ID[r["id"]]
        assert r["half"] == row.half and r["published_us"] == row.latency_us and r["url"] == cal.SOURCES[row.source]
    assert "|" in cal.format_table(data)


def test_the_table_in_the_docs_is_the_committed_json():
    docs = (Path(__file__).resolve().parent.parent / "docs" / "calibration.md").read_text()
    assert cal.format_table(cal.load(JSON_PATH)) in docs


def _benchmark():
    import importlib.util
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "calibration_table.py"
    spec = importlib.util.spec_from_file_location("calibration_table_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_model_is_gather_issue_and_start_up_with_their_fitted_constants():
    # docs/calibration.md, "The model: (d) + (b) + start-up": each --what-if is on the page; the presets
    # carry exactly the constants the calibration half fitted (or [LAUNCH] gave), Trn3 inheriting
    # Trn2's and its own engines' gather rate; the candidates not adopted stay off
    from trnlab.hardware import presets
    docs = (Path(__file__).resolve().parent.parent / "docs" / "calibration.md").read_text()
    bench = _benchmark()
    for name, case in bench.WHAT_IF.items():
        assert f"`{name}`" in docs
        assert set(case["spec"]) <= {"trn1", "trn2"}
    trn1, trn2, trn3 = presets.TRN1_CORE, presets.TRN2_CORE, presets.TRN3_CORE
    assert (trn1.launch_start_ns, trn1.launch_end_ns) == (13_000.0, 4_300.0) == tuple(bench.LAUNCH["trn1"].values())
    assert trn2.launch_start_ns + trn2.launch_end_ns == pytest.approx(bench.START_UP_US * 1e3)
    assert trn1.dma_hbm_gather_bandwidth == bench.GATHER_TRN1
    assert trn2.dma_hbm_gather_bandwidth == pytest.approx(16 * trn2.dma_engine_bandwidth)
    assert trn3.dma_hbm_gather_bandwidth == pytest.approx(16 * trn3.dma_engine_bandwidth)
    assert (trn2.dma_issue_ns, trn2.dma_descriptor_ns) == (478.0, 64.0) == (trn3.dma_issue_ns, trn3.dma_descriptor_ns)
    assert trn1.dma_issue_ns == trn2.dma_issue_ns                    # ASSUMED: no Trn1 row to fit it on
    assert trn3.launch_start_ns == trn2.launch_start_ns
    assert all(core.dma_descriptor_setup_ns == 0.0 for core in presets.CORES.values())
    assert all(not core.dma_queue_pipelined for core in presets.CORES.values())
    # (j), adopted as the default flow's address rotation: on unless a kernel's configuration keeps its storage
    from trnlab import config
    from trnlab.nki.compile_config import flow
    assert config.get("versions") and flow(None).split_reused
    assert bench.WHAT_IF["versions"]["switches"] == {"versions": True}


def _before(chip: str):
    """The chip's core as the model was before 2026-12-04 (the candidates were fitted against it)."""
    from trnlab.hardware import presets
    return presets.CORES[chip].derive(**_benchmark().BEFORE[chip])


def test_the_issue_candidate_fits_its_calibration_row_and_predicts_the_held_back_one():
    # candidate (b): dma_descriptor_ns fitted on cs149-stream-2 (calibration); cs149-rows-128 is held back
    from trnlab.hardware import presets
    bench = _benchmark()
    target = presets.TRN2.core.derive(**bench.WHAT_IF["issue"]["spec"]["trn2"])
    fitted = cal.BY_ID["cs149-stream-2"]
    held = cal.BY_ID["cs149-rows-128"]
    assert bench._vector_add(fitted, target=target)[0] == pytest.approx(fitted.latency_us, rel=0.02)
    assert bench._vector_add(held, target=target)[0] == pytest.approx(held.latency_us, rel=0.05)
    assert bench._vector_add(held, target=_before("trn2"))[0] > 1.5 * held.latency_us     # before: +60 %


def test_the_start_up_candidate_fits_its_calibration_row_and_predicts_the_held_back_one_step_kernels():
    # docs/calibration.md: Trn2's start-up fitted on cs149-stream-2000 (calibration); the one-step
    # kernels FREE_DIM 200 and 1000 are held back: within 25 % with it, over 50 % off without
    from trnlab.hardware import presets
    bench = _benchmark()
    target = presets.TRN2.core.derive(**bench.WHAT_IF["start-up"]["spec"]["trn2"])
    fitted = cal.BY_ID["cs149-stream-2000"]
    assert bench._vector_add(fitted, target=target)[0] == pytest.approx(fitted.latency_us, rel=0.01)
    for held in (cal.BY_ID["cs149-stream-200"], cal.BY_ID["cs149-stream-1000"]):
        assert bench._vector_add(held, target=target)[0] == pytest.approx(held.latency_us, rel=0.25)
        assert abs(bench._vector_add(held, target=_before("trn2"))[0] / held.latency_us - 1) > 0.5   # before


def test_the_trn1_start_up_is_the_figure_read_off_aws_mamba_profile():
    # [LAUNCH] (presets.py): the first DMA 13.0 µs after the profile starts, the last ending 4.3 µs
    # before its end; the page quotes the same figures
    bench = _benchmark()
    docs = (Path(__file__).resolve().parent.parent / "docs" / "calibration.md").read_text()
    assert bench.LAUNCH["trn1"] == {"launch_start_ns": 13_000.0, "launch_end_ns": 4_300.0}
    assert "13.0 µs" in docs and "4.3 µs" in docs


def test_the_bytes_plus_setup_candidate_keeps_the_trn1_tutorial_and_the_trn2_hoisted_bound():
    # candidate (c): Trn1's fixed part fitted on mm-trn1-hoisted (within 1 % of AWS's 42.96 ms is the
    # rule for any default); Trn2's leaves a 2 KiB fp32 row under opt-trn2-hoisted's 107 ns
    from trnlab.hardware import cost, presets
    bench = _benchmark()
    spec = bench.WHAT_IF["bytes+setup"]["spec"]
    trn2 = presets.TRN2.core.derive(**spec["trn2"])
    row_ns = cost.dma_cost(trn2, 128 * 2048, 128).cycles / 8        # 8 rows per engine
    assert 100.0 <= row_ns <= 107.0
    trn1 = presets.TRN1.core.derive(**spec["trn1"])
    assert cost.dma_cost(trn1, 128 * 1024, 128).cycles / 8 == pytest.approx(150.0, rel=0.03)


def test_the_autotune_mfu_is_full_square_flops_over_the_trn2_bf16_peak():
    # [AUTOTUNE]: the tuner's own 44.88 % for 1.947 ms (attention at D = 64, S = 16k) holds with FLOPs =
    # 4 S^2 D and 2 x 128 x 128 x 2.4 GHz; the rows' latencies are what their MFU implies
    assert 100 * cal.attention_flops(16384, 64) / (1.947e-3 * cal.AUTOTUNE_PEAK_FLOPS) == pytest.approx(44.88, abs=0.01)
    assert cal.BY_ID["autotune-mm-single"].latency_us == pytest.approx(366.0, rel=0.005)    # its 0.000366 s
    assert cal.BY_ID["autotune-mm-rotating"].latency_us == pytest.approx(262.0, rel=0.005)  # its 0.000262 s


def test_the_hand_blocked_matmul_missed_by_the_descriptor_floor_only():
    # docs/calibration.md: with 1 KiB rows costing their bandwidth only (no 100 ns floor) the kernel
    # runs within 1 % of the chip's 240.3 us; with the floor of the model before it was DMA-bound and
    # over 25 % slower; the model's gather rate (not fitted on Trn2) brings it within 6 %
    from trnlab.hardware import presets
    from trnlab.kernels import matmul_psum_pipeline as pipeline
    row = cal.BY_ID["autotune-mm-hand"]
    before = _before("trn2")
    floorless = before.derive(dma_descriptor_ns=1024 / presets.TRN2.core.dma_engine_bandwidth * 1e9)  # 44.5 ns
    assert pipeline.run(pipeline.matmul_hand_blocked, target=floorless)[0].latency_us == pytest.approx(
        row.latency_us, rel=0.01)
    assert pipeline.run(pipeline.matmul_hand_blocked, target=before)[0].latency_us > 1.25 * row.latency_us
    assert pipeline.run(pipeline.matmul_hand_blocked)[0].latency_us == pytest.approx(row.latency_us, rel=0.06)


def test_the_gather_candidate_fits_the_hoisted_kernel_and_predicts_the_tiled_kernel_on_both_chips():
    # candidate (d), docs/calibration.md "The Trn1 tiled kernel, mechanism by mechanism": Trn1's rate
    # fitted on mm-trn1-hoisted (calibration); mm-trn1-tiled and opt-trn2-tiled's TensorE are held
    # back (Trn2's rate is [DMA-BW]'s, not fitted). A sixteenth of AWS's M, times 16 (the kernels'
    # time grows with M block by block)
    from trnlab.hardware import presets
    from trnlab.kernels import matmul_ladder as ladder
    bench = _benchmark()
    spec = bench.WHAT_IF["gather"]["spec"]
    shape = dict(M=ladder.AWS_SHAPE["M"] // 16, N=ladder.AWS_SHAPE["N"], K=ladder.AWS_SHAPE["K"])
    trn1 = presets.TRN1.core.derive(**spec["trn1"])

    def trn1_ms(kernel, target):
        return ladder.run_step(kernel, dtype="bfloat16", target=target, **shape).latency_us * 16 / 1e3
    assert trn1_ms(ladder.matmul_hoisted, trn1) == pytest.approx(cal.BY_ID["mm-trn1-hoisted"].latency_us / 1e3, rel=0.01)
    tiled = cal.BY_ID["mm-trn1-tiled"].latency_us / 1e3
    assert trn1_ms(ladder.matmul_tiled, trn1) == pytest.approx(tiled, rel=0.05)
    assert trn1_ms(ladder.matmul_tiled, _before("trn1")) > 1.4 * tiled         # the model before: +54 %
    assert trn1_ms(ladder.matmul_tiled, "trn1") == pytest.approx(tiled, rel=0.05)  # the model now
    trn2 = presets.TRN2.core.derive(**spec["trn2"])
    pe = ladder.run_step(ladder.matmul_tiled, dtype="float32", target=trn2, **shape).active["pe"]
    assert pe == pytest.approx(cal.BY_ID["opt-trn2-tiled"].active["pe"], abs=5.0)


def test_the_hoist_candidate_predicts_mamba_v2_from_the_page_s_code_less_one_product_per_state():
    # candidate (e), docs/calibration.md "Mamba: the Vector engine's work per step": v2 with delta * u
    # computed once per channel tile (no constant fitted) lands on AWS's v2 at 4096 channels
    # (calibration row), and v1 -> v2 then holds as a lesson (1.45x published)
    from trnlab.hardware import presets
    bench = _benchmark()
    case = bench.WHAT_IF["hoist"]
    trn1 = presets.TRN1.core                                        # on top of the model
    v2 = cal.BY_ID["mamba-v2-c4096"]
    hoisted, active, _ = bench._mamba(v2, target=trn1, **case["mamba"])
    assert hoisted == pytest.approx(v2.latency_us, rel=0.02)
    assert active["dve"] == pytest.approx(v2.active["dve"], abs=5.0)
    as_written = bench._mamba(v2, target=trn1)[0]
    assert as_written > 1.25 * v2.latency_us                        # the page's code as written: +30 %
    v1 = bench._mamba(cal.BY_ID["mamba-v1-c4096"], target=trn1)[0]
    assert 1.45 / 1.5 <= v1 / hoisted <= 1.45 * 1.5 and v1 / as_written < 1.01


def test_aws_dma_active_definition_moves_only_the_dma_figure_and_lowers_it():
    # candidate (h): the [OPT-trn2] rows' DMA figure as AWS's profiler defines it ("at least one DMA
    # packet is transferring": Profile.dma_transferring, from the end of the fixed latency) instead of
    # "any queue" (from the trigger): the same run, the latency and TensorE unchanged, DMA lower
    bench = _benchmark()
    row = cal.BY_ID["opt-trn2-hoisted"]
    any_queue = bench._matmul(row)
    transferring = bench._matmul(row, **bench.WHAT_IF["aws-dma-active"]["matmul"])
    assert transferring[0] == any_queue[0]
    assert transferring[1]["pe"] == any_queue[1]["pe"]
    assert transferring[1]["dma"] < any_queue[1]["dma"]
    assert f"dma transferring {transferring[1]['dma']:.1f} %" in transferring[2]   # the note's figure


def test_the_trn2_gather_fit_is_the_slowest_rate_that_keeps_its_calibration_row():
    # candidate (i): autotune-mm-hand (calibration) is the only calibration figure that depends on
    # Trn2's gather rate; its time is flat from GATHER_TRN2_FIT up (the model's 368 GB/s included) and
    # rises below it; the fitted rate leaves the held-back blocked-free DMA figure far from AWS's 95.7 %
    from trnlab.hardware import presets
    from trnlab.kernels import matmul_psum_pipeline as pipeline
    bench = _benchmark()
    fit = bench.WHAT_IF["gather-fit"]["spec"]["trn2"]["dma_hbm_gather_bandwidth"]
    assert fit == bench.GATHER_TRN2_FIT < presets.TRN2_CORE.dma_hbm_gather_bandwidth

    def hand_us(rate):
        target = presets.TRN2_CORE.derive(dma_hbm_gather_bandwidth=rate)
        return pipeline.run(pipeline.matmul_hand_blocked, target=target)[0].latency_us
    model = pipeline.run(pipeline.matmul_hand_blocked)[0].latency_us
    assert hand_us(fit) == pytest.approx(model, rel=0.005)
    assert hand_us(0.95 * fit) > 1.02 * model
    row = cal.BY_ID["opt-trn2-block-free"]
    dma = bench._matmul(row, target=presets.TRN2_CORE.derive(dma_hbm_gather_bandwidth=fit))[1]["dma"]
    assert abs(dma - row.active["dma"]) > 25.0


def test_a_pipelined_queue_takes_its_next_transfer_during_the_previous_one_s_fixed_latency():
    # CoreSpec.dma_queue_pipelined (candidate hoist+one-queue): two transfers on one queue, in order;
    # the second's fixed latency overlaps the first's data instead of following its end
    from trnlab.hardware import presets
    from trnlab.hardware.engines import EngineTimes, FIRST_DMA
    for pipelined in (False, True):
        spec = presets.TRN1.core.derive(dma_queues=1, dma_queue_pipelined=pipelined)
        times = EngineTimes(spec, FIRST_DMA + 1)
        first = times.dma(0, 0.0, -1, 1300.0, 1000.0, 1000.0, 0)
        second = times.dma(0, 0.0, -1, 1300.0, 1000.0, 1000.0, 0)
        assert first[2] == pytest.approx(2300.0)
        assert second[2] == pytest.approx(3300.0 if pipelined else 4600.0)
    assert all(not core.dma_queue_pipelined for core in presets.CORES.values())


def test_the_candidates_tables_are_on_every_row():
    # docs/calibration.md, "What was tried for the largest misses": a row per candidate (the model among them)
    # in both tables, and the summary's counts out of every latency row, active figure and lesson of ROWS
    import re
    docs = (Path(__file__).resolve().parent.parent / "docs" / "calibration.md").read_text()
    bench = _benchmark()
    latency = {h: sum(r.half == h and r.latency_us is not None for r in cal.ROWS) for h in (cal.CALIBRATION, cal.HELD_BACK)}
    active = {h: sum(len(r.active) for r in cal.ROWS if r.half == h) for h in (cal.CALIBRATION, cal.HELD_BACK)}
    summary = docs[docs.index("| candidate | calibration half"):].split("\n\n")[0].splitlines()[2:]
    autotune = docs[docs.index("| candidate | one accumulator"):].split("\n\n")[0].splitlines()[2:]
    assert len(summary) == len(autotune) == len(bench.WHAT_IF)
    for line in summary:
        cells = line.split("|")[2:5]
        for cell, half in zip(cells, (cal.CALIBRATION, cal.HELD_BACK)):
            assert re.findall(r"of (\d+)", cell) == [str(latency[half]), str(active[half])], line
        assert re.fullmatch(rf" \d+ of {len(cal.LESSONS)} ", cells[2]), line
