"""Benchmark the collectives: how fast the NumPy algorithms run, and the cost model's tables.

    python benchmarks/bench_collectives.py             # everything (about 10 s)
    python benchmarks/bench_collectives.py --numerics  # wall time of the executed algorithms only
    python benchmarks/bench_collectives.py --model     # the modelled times per preset only
    python benchmarks/bench_collectives.py --scaling   # DP / TP / PP scaling of a 7B-class model per preset
    python benchmarks/bench_collectives.py --levels    # Trn3's per-level fabric against one link figure
    python benchmarks/bench_collectives.py --validate  # the cost model against every published measurement

Numerics: a ring / rdh / mesh all-reduce of p float32 arrays executed step by step, against NumPy's
``np.sum(np.stack(arrays), axis=0)`` on the same arrays (the baseline, measured in the same run).
Target: ≤ 4× the baseline for 16 MiB per rank on 8 ranks (the algorithms copy each piece once per
step; the sum itself is the same work).
Model: the modelled all-reduce time and bus bandwidth on each preset for 1 KiB, 1 MiB and 1 GiB (the
documented link figures and the calibrated model), the textbook check, and the validation against
nccom-test's published runs with the fitted constants and the gap per case (docs/distributed.md).
Scaling: throughput against chips, the share of the step in communication, per preset, for DP, TP, PP.
Levels: an all-reduce over 4, 72 and 144 chips of a Trn3 Gen2 UltraServer, stage by stage over the
sled / rack / racks links (trn3-arch's 256 / 320 / 128 GB/s), against the baseline of the same run:
the single-figure model trnlab used before (every chip on NeuronLink-v4 through one switch, 2.56 TB/s).
Validate: every published nccom-test run trnlab can model (`validation.runs()`: source, command, platform
or our reading of it, collective, ranks, dtype, sizes) run through the cost model under the same
conditions: measured, the documented model and the calibrated model of the run's runtime era, each with
its error, which rows fitted the calibration and which are held out, and the figures not compared and
why. No Trn3 (or Trn2 UltraServer) collective measurement is published: those models are unvalidated.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: `python benchmarks/...`


def best_of(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def numerics(ranks: int = 8, mib: int = 16) -> None:
    from trnlab.distributed import collectives
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(mib * 2**20 // 4).astype(np.float32) for _ in range(ranks)]
    baseline = best_of(lambda: np.sum(np.stack(arrays), axis=0))
    print(f"all-reduce of {ranks} × {mib} MiB float32 (baseline np.sum of the stack: {baseline * 1e3:.1f} ms)")
    for algorithm in ("ring", "rdh", "mesh", "tree"):
        seconds = best_of(lambda: collectives.all_reduce(arrays, algorithm))
        target = "  (target ≤ 4×)" if algorithm == "ring" else ""
        print(f"  {algorithm:5} {seconds * 1e3:8.1f} ms = {seconds / baseline:5.2f}× the baseline{target}")


def model() -> None:
    from trnlab.distributed import collectives, topology, validation
    print("modelled all-reduce over all chips of each system (best algorithm; documented links | calibrated)")
    print(f"  {'system':26} {'size':>6} {'algorithm':32} {'time (µs)':>11} {'busbw (GB/s)':>13} "
          f"{'calibrated (µs)':>16} {'busbw (GB/s)':>13}")
    for name in topology.SYSTEMS:
        for size, label in ((2**10, "1 KiB"), (2**20, "1 MiB"), (2**30, "1 GiB")):
            c = collectives.best_algorithm("all_reduce", size, topology.get(name))
            k = collectives.best_algorithm("all_reduce", size, topology.get(name), calibration=topology.NCCOM_TRN1)
            print(f"  {name:26} {label:>6} {c.algorithm:32} {c.time_ns / 1e3:11,.1f} {c.busbw / 1e9:13,.1f} "
                  f"{k.time_ns / 1e3:16,.1f} {k.busbw / 1e9:13,.1f}")
    check = validation.textbook_check()
    print(f"\ntextbook: ring all-reduce of {check['bytes']:,} B over {check['ranks']} ranks sends 2(p-1)/p·B = "
          f"{check['textbook 2(p-1)/p·B']:,.0f} B per rank; executed: {check['sent per rank (executed)']:,}; "
          f"cost model's bandwidth term: {check['bandwidth term × link (bytes)']:,.0f}")
    print(validation.markdown(validation.textbook_rows()))
    fit = validation.fit_nccom()
    print(f"\ncalibration fitted to nccom-test (trn1): fixed cost {fit['launch (µs)']:.1f} µs per collective, "
          f"ring step {fit['ring step (µs)']:.2f} µs, {fit['bytes/s per core'] / 1e9:.1f} GB/s per core = "
          f"{fit['DMA engines per core']:.2f} DMA engines at 27.2 GB/s (used: {topology.NCCOM_LAUNCH_NS / 1e3:.0f} µs, "
          f"{topology.NCCOM_HOP_NS / 1e3:.1f} µs, {topology.CC_DMA_ENGINES} engines)")
    print("validation against nccom-test's published runs (trn1; 'fit': the row was used to fit the constants)")
    rows = validation.published_rows()
    print(validation.markdown(rows))
    print(validation.markdown(validation.gap_summary(rows)))
    print("\nnccom-test's --show-algorithm run (16 ranks, platform not named; read as 4 Trn2 chips at LNC=2)")
    print(validation.markdown(validation.trn2_rows()))


def levels() -> None:
    from trnlab.distributed import collectives, topology
    per_level = topology.TRN3_ULTRASERVER_GEN2
    one_figure = per_level.derive(name="one NeuronLink-v4 figure", ranks_per_server=per_level.ranks, servers=1,
                                  racks=1, intra=topology.NEURONLINK_V4, inter=None, rack_link=None)
    print(f"ring all-reduce on {per_level.name}: per-level fabric vs the baseline (one NeuronLink-v4 figure, "
          f"{topology.NEURONLINK_V4.bandwidth / 1e9:,.0f} GB/s per chip, all chips on one switch)")
    print(f"  {'chips':>5} {'size':>6} {'per level (µs)':>15} {'baseline (µs)':>14} {'ratio':>7}  stages (µs)")
    for chips in (4, 72, 144):
        for size, label in ((2**10, "1 KiB"), (2**20, "1 MiB"), (2**30, "1 GiB")):
            ours = collectives.cost("all_reduce", size, per_level, "ring", chips)
            base = collectives.cost("all_reduce", size, one_figure, "ring", chips)
            stages = collectives.level_costs("all_reduce", size, per_level, "ring", chips)
            slowest = max(stages, key=lambda s: s.time_ns)
            cells = ", ".join(f"{s.level} ×{s.group} {s.time_ns / 1e3:,.1f}" for s in stages)
            print(f"  {chips:5} {label:>6} {ours.time_ns / 1e3:15,.1f} {base.time_ns / 1e3:14,.1f} "
                  f"{ours.time_ns / base.time_ns:7.2f}  {cells}  (slowest: {slowest.level})")


def validate() -> None:
    from trnlab.distributed import topology, validation
    fit = validation.fit_recent()
    print(f"calibrations: {topology.NCCOM_TRN1.name} (fixed {topology.NCCOM_LAUNCH_NS / 1e3:.0f} µs, ring step "
          f"{topology.NCCOM_HOP_NS / 1e3:.1f} µs, {topology.CC_DMA_ENGINES} DMA engines per core); "
          f"{topology.NCCOM_RECENT.name} (fixed {topology.NCCOM_RECENT_LAUNCH_NS / 1e3:.2f} µs = "
          f"{fit['measured (µs)']} µs measured - {fit['documented model (µs)']:.2f} µs of one "
          f"{fit['algorithm']} step; "
          f"documented hop; {topology.CC_DMA_ENGINES} DMA engines per core)")
    print("error = model / measured - 1; role 'fit': the row fitted the calibration, 'held out': it did not")
    rows = validation.validate_rows()
    print(validation.markdown(rows))
    print(validation.markdown(validation.validate_summary(rows)))
    print("\nwhich bandwidth each run can test (the calibrated model's bandwidth term per level):")
    print(validation.markdown(validation.binding_limits()))
    print("\nthe unnamed platforms read the other way:")
    print(validation.markdown(validation.alternative_readings()))
    print("\npublished figures not compared:")
    for what, why in validation.NOT_COMPARED:
        print(f"  - {what}: {why}")
    print("no Trn3 or Trn2 UltraServer collective measurement is published: their models are unvalidated")


def scaling_tables(model_name: str = "7B-class", global_batch: int = 128) -> None:
    from trnlab.distributed import scaling, topology
    model = scaling.MODELS[model_name]
    for calibration in (None, topology.NCCOM_TRN1):
        which = "documented link figures" if calibration is None else calibration.name
        print(f"\n{model_name} ({model.params / 1e9:.1f}B parameters), {global_batch} sequences of {model.seq_len} "
              f"tokens per step, collectives from the {which}")
        print("  chips:tokens/s / share of the step communicating, not hidden (all collectives) (✕: does not fit a chip)")
        for name in topology.SYSTEMS:
            for strategy in ("dp", "tp", "pp"):
                rows = scaling.scaling(model, topology.get(name), global_batch, strategy, calibration=calibration)
                cells = "  ".join(f"{r.chips}:{r.tokens_per_second / 1e3:,.0f}k/{r.communication_share:.0%}"
                                  f"({r.collective_share:.0%})"
                                  f"{'' if r.fits else '✕'}" for r in rows)
                print(f"  {name:24} {strategy.upper()}  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--numerics", action="store_true")
    parser.add_argument("--model", action="store_true")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--levels", action="store_true")
    parser.add_argument("--validate", action="store_true")
    args = parser.parse_args()
    both = not (args.numerics or args.model or args.scaling or args.levels or args.validate)
    if args.numerics or both:
        numerics()
    if args.model or both:
        model()
    if args.levels or both:
        levels()
    if args.validate or both:
        validate()
    if args.scaling or both:
        scaling_tables()


if __name__ == "__main__":
    main()
