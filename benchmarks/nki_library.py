"""Run AWS's NKI Library (its production kernels) on trnlab and print a table per kernel.

    python benchmarks/nki_library.py --library /work/nkilib [--out docs/nki_library.md] [-k cumsum]

For each kernel's test file under the library's test/integration/nkilib/{core,experimental}/ it runs
the library's own pytest harness, unmodified, in its CPU-simulation mode (``--test-mode
simulation``) through trnlab's zero-edit import hook (benchmarks/nki_library_plugin.py):

- full mode: the file's ``fast`` tests that the simulation mode runs, compared by the harness with
  the library's PyTorch references at those (small) shapes;
- timing-only: the tests the simulation mode skips for their size (the production shapes), costed
  without values: every one a file lists (--max-timed 0; N: the first N), those AWS marks ``fast``
  first, while the file's timing-only tests have used less than --timed-budget CPU seconds (10; 0: no
  budget, every production shape: 4,054 on trn2 at the library's commit d2ad3a5, hours of CPU).

Then, for each file with tests the library keeps off --platform (trn2) — marked
``@pytest.mark.platforms(exclude=[..., Platforms.TRN2])`` or skipping themselves there (the MX, i.e.
microscaling, tests: NeuronCore-v4 only) — a second session of the harness runs those tests alone with
``--platform-target trn3`` (the harness's own switch: it marks, selects and launches each test for that
target and sets NKI_NC_VERSION=gen4, which trnlab's zero-edit hook reads), same rules (--no-trn3-pass:
not). Each row of the table is one file on one platform.

Each test's time is split between trnlab's part (inside a kernel run: tracing, costing, values) and the
library's harness (its input generators, references, comparison), both in CPU seconds of the session's
process (`nki_library_clocks.py`), and each has its limit: --seconds (60) for trnlab's, --harness-seconds
(90) for the harness's; a timeout names whose part ran out. --jobs N runs N files at once. SBUF tiles that do not fit are spilled to HBM as AWS's
compiler would (trnlab's TRNLAB_SPILL switch), and PSUM accumulators that outgrow PSUM in the order written are
copied out once final (TRNLAB_PSUM_EVACUATION, ASSUMED; --no-spill refuses both instead). The result per test (pass / mismatch / error with the
first error line / timeout), its simulated latency and the library's QoR metrics computed from
trnlab's timeline (`trnlab.nki.qor`) go to a JSON-lines file; the table is printed and, with --out,
written as Markdown with the command and the library commit. The library is copied to /tmp first
(its harness writes in-tree); nothing is written into --library. A benchmark: run on demand, not in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TESTS = "test/integration/nkilib"
SECOND_PLATFORM = "trn3"      # the NeuronCore-v4 target of the tests the first platform does not run


def copy_library(library: Path, dest: Path) -> str:
    """Copy the library's committed tree into `dest`; return its commit (or 'unknown')."""
    try:
        commit = subprocess.run(["git", "-C", str(library), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        archive = subprocess.run(["git", "-C", str(library), "archive", "HEAD"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        commit = "unknown"
        shutil.copytree(library, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    return commit


def test_files(root: Path, pattern: str | None, start: str | None = None) -> list[Path]:
    """The library's test files that define tests (helpers such as *_utils.py hold none); with
    `start`, only from the first file whose path contains it on."""
    files = []
    for part in ("core", "experimental"):
        for path in sorted((root / TESTS / part).rglob("test_*.py")):
            text = path.read_text(errors="replace")
            if "def test_" not in text:
                continue
            if pattern and pattern not in str(path.relative_to(root / TESTS)):
                continue
            files.append(path)
    if start:
        first = next((i for i, f in enumerate(files) if start in str(f)), len(files))
        files = files[first:]
    return files


def run_files(root: Path, paths: list[Path], results: Path, args, extra_plugins: list[str]) -> int:
    """Run each test file in a pytest session of its own of the library's harness (a fresh process:
    memory one file's tests leave behind does not reach the next), then, if it has tests --platform does
    not run, those on trn3 in a second session; --jobs files at once; return the worst exit code."""
    def one(index_path) -> list[int]:
        index, path = index_path
        codes = [run_session(root, [path], results, args, extra_plugins, args.platform)]
        print(f"  {path.relative_to(root / TESTS)}: pytest exit {codes[-1]}", flush=True)
        if args.no_trn3_pass or args.platform == SECOND_PLATFORM:
            return codes
        rerun = skipped_for_second_platform(root, path, results)
        if rerun or excludes_platform(path, args.platform):
            nodeids = results.with_suffix(f".{index}.rerun")
            nodeids.write_text("".join(n + "\n" for n in rerun))
            code = run_session(root, [path], results, args, extra_plugins, SECOND_PLATFORM,
                               only_excluded_from=args.platform, rerun=nodeids)
            nodeids.unlink()
            codes.append(0 if code == 5 else code)      # 5: nothing there to run after all
            print(f"  {path.relative_to(root / TESTS)} on {SECOND_PLATFORM}: pytest exit {code}", flush=True)
        return codes
    # each session appends whole lines to the results file (one write each), so sessions may share it
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        codes = [c for file_codes in pool.map(one, enumerate(paths)) for c in file_codes]
    return max(codes, default=0)


def excludes_platform(path: Path, platform: str) -> bool:
    """Whether the test file marks tests not to run on `platform` (``platforms(exclude=[...])``)."""
    text = path.read_text(errors="replace")
    return re.search(r"exclude\s*=\s*\[[^\]]*Platforms\." + re.escape(platform.upper()) + r"\b", text) is not None


def skipped_for_second_platform(root: Path, path: Path, results: Path) -> list[str]:
    """Node ids of the file's tests that skipped themselves on the first platform naming trn3 (e.g.
    moe_block_tkg's "MX is only supported on TRN3.")."""
    rel = str(path.relative_to(root / "test"))
    nodeids = []
    for line in results.read_text().splitlines():
        r = json.loads(line)
        if (r["nodeid"].split("::")[0] == rel and r["outcome"] == "skipped"
                and re.search(r"\b" + SECOND_PLATFORM + r"\b", r["error"], re.IGNORECASE)):
            nodeids.append(r["nodeid"])
    return nodeids


def run_session(root: Path, paths: list[Path], results: Path, args, extra_plugins: list[str], platform: str,
                only_excluded_from: str = "", rerun: Path | None = None) -> int:
    """One pytest session of the library's harness over `paths` for `platform`; return pytest's exit code.
    `only_excluded_from`: only the tests the library keeps off that platform, and those in `rerun`."""
    out_dir = Path(tempfile.mkdtemp(prefix="nkilib-out-"))
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), str(root / "src")] +
                                      [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "NKILIB_RESULTS": str(results), "NKILIB_MAX_FAST": str(args.max_fast),
        "NKILIB_MAX_TIMED": str(args.max_timed), "NKILIB_TEST_SECONDS": str(args.seconds),
        "NKILIB_HARNESS_SECONDS": str(args.harness_seconds), "NKILIB_TIMED_BUDGET": str(args.timed_budget),
        # a backstop for a test that hangs (sleeping, not spending CPU); a shared machine can stretch a
        # CPU second to seven of wall time (measured here with six programs on two cores)
        "NKILIB_WALL_SECONDS": str(int(10 * (args.seconds + args.harness_seconds))),
        "NKILIB_SIMULATION_RUN_ALL": "1",       # the harness's own switch: keep the large tests (run timing-only)
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "NEURON_PYTHONHASHSEED": "0", "PYTHONHASHSEED": "0",    # the harness seeds its sampled sweeps with it
        # AWS's compiler spills what does not fit in SBUF; trnlab does with its spill switch
        "TRNLAB_SPILL": "0" if args.no_spill else "1",
        # and it schedules before it allocates: PSUM accumulators copied out once final (ASSUMED)
        "TRNLAB_PSUM_EVACUATION": "0" if args.no_spill else "1",
        "NKILIB_FULL_LARGE": "1" if args.full_large else "0",
        # on the chip a store of garbage is no error, only an output that keeps it (mlp_proj_mxfp4's test
        # stores a padded tile whole, then zeros over the padding)
        "TRNLAB_GARBAGE_STORES": "1",
        "NKILIB_ONLY_EXCLUDED_FROM": only_excluded_from,
        "NKILIB_RERUN_NODEIDS": str(rerun or ""),
    })
    plugins = [x for p in extra_plugins + ["nki_library_plugin"] for x in ("-p", p)]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugins,
               *[str(p.relative_to(root)) for p in paths], "--continue-on-collection-errors",
               "--test-mode", "simulation", "--platform-target", platform,
               "--output-directory", str(out_dir), "-q", "-n", "0", "-W", "ignore", "-rN", "--tb=no"]
    with open(results.with_suffix(".log"), "a") as log:
        code = subprocess.run(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    shutil.rmtree(out_dir, ignore_errors=True)
    return code


def kernel_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root / TESTS).with_suffix("")
    return "/".join(rel.parts[:-1] + (rel.parts[-1].removeprefix("test_"),))


def summarize(records: list[dict], mode: str) -> dict:
    mine = [r for r in records if r["mode"] == mode and r["outcome"] != "skipped"]
    ok = "timed" if mode == "timing" else "passed"
    good = [r for r in mine if r["outcome"] == ok]
    bad = [r for r in mine if r["outcome"] != ok]
    return {"n": len(mine), "good": good, "bad": bad}


def result_cell(summary: dict, tail: str, code: int, mode: str, listed: int | None = None) -> str:
    """`listed`: how many tests of this kind the file lists (its census), when more than ran."""
    if not summary["n"]:
        if code in (0, 5):
            return "none"       # every test skipped (e.g. TRN3 only) or none at these sizes
        return f"error: {tail}"
    ok = "timed" if mode == "timing" else "pass"
    idle = sum(1 for r in summary["good"] if not r.get("runs"))
    note = f" ({idle} ran no kernel)" if idle else ""
    of = f" of {listed} listed" if listed is not None and listed > summary["n"] else ""
    if not summary["bad"]:
        return f"{ok} {len(summary['good'])}/{summary['n']}{of}{note}"
    first = summary["bad"][0]
    return f"{len(summary['good'])}/{summary['n']}{of} {ok}{note}; {first['outcome']}: {first['error']}"


def cpu_cell(summary: dict) -> str:
    """The slowest test's trnlab part and the slowest test's harness part, in CPU seconds."""
    tests = [r for r in summary["good"] + summary["bad"] if "trnlab_cpu_s" in r]
    if not tests:
        return ""
    return f"{max(r['trnlab_cpu_s'] for r in tests):.1f} / {max(r['harness_cpu_s'] for r in tests):.1f}"


def time_cell(summary: dict) -> str:
    times = [r["latency_us"] for r in summary["good"] if "latency_us" in r]
    if not times:
        return ""
    return f"{min(times):.1f}" if len(times) == 1 or min(times) == max(times) else f"{min(times):.1f}–{max(times):.1f}"


def qor_cell(summary: dict) -> str:
    runs = [r for r in summary["good"] if "qor" in r]
    if not runs:
        return ""
    q = max(runs, key=lambda r: r["latency_us"])["qor"]     # the largest shape run
    return (f"{q['TpbSgCyclesSum']:,} cyc, MBU {q['MbuEstimatedPercent']:.1f}%, "
            f"MFU {q['ProfilerMFU']:.1f}%")


def table(rows: list[dict]) -> str:
    head = ("| kernel (test file) | platform | fast tests, full vs AWS's reference | simulated µs | CPU s, max: trnlab / "
            "harness | production shapes, timing-only | simulated µs | CPU s, max: trnlab / harness | QoR at the "
            "largest (TpbSgCyclesSum, MbuEstimatedPercent, ProfilerMFU) |\n"
            "|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines.append(f"| {r['kernel']} | {r['platform']} | {cell(r['full'])} | {r['full_us']} | {r['full_cpu']} | "
                     f"{cell(r['timing'])} | {r['timing_us']} | {r['timing_cpu']} | {r['qor']} |")
    return "\n".join(lines)


def details(records: list[dict]) -> str:
    lines = ["| test | mode | result | simulated µs | InferenceTime s | ActiveInferenceTime s | TpbSgCyclesSum | "
             "MbuEstimatedPercent | ProfilerMFU | LNC | platform | trnlab CPU s | harness CPU s | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        q = r.get("qor") or {}
        result = r["outcome"] + (f": {r['error']}" if r["error"] and r["outcome"] != "skipped" else "")
        result += " (the test ran no kernel)" if r["outcome"] == "passed" and not r.get("runs") else ""
        fmt = lambda key, spec: format(q[key], spec) if key in q else ""  # noqa: E731
        lines.append(f"| `{r['nodeid'].split('/')[-1]}` | {r['mode']} | {result.replace('|', '/')} | "
                     f"{r.get('latency_us', 0):.2f} | {fmt('InferenceTime', '.3e')} | "
                     f"{fmt('ActiveInferenceTime', '.3e')} | {fmt('TpbSgCyclesSum', ',')} | "
                     f"{fmt('MbuEstimatedPercent', '.2f')} | {fmt('ProfilerMFU', '.2f')} | {r.get('lnc', '')} | "
                     f"{r.get('platform', '')} | {r.get('trnlab_cpu_s', '')} | {r.get('harness_cpu_s', '')} | "
                     f"{r['wall_s']} |")
    return "\n".join(lines)


PREAMBLE = """\
Each row is one test file of the library (`test/integration/nkilib/<path>`), run by the library's own
pytest harness in its CPU-simulation mode, unmodified, through trnlab's zero-edit import hook
(`benchmarks/nki_library_plugin.py`). **Fast tests, full**: the file's `fast` tests that the
library's simulation mode runs (up to {max_fast}; a file without `fast` tests: its first tests that
mode runs), values compared by the harness with the library's
PyTorch references at the test's tolerances. **Production shapes, timing-only**: the tests its
simulation mode skips for their size, costed without values: {timed_rule}; the cell says how many ran
of how many the file lists ("timed 5/5 of 196 listed"), the simulated µs their range.

**CPU s, max: trnlab / harness**: every test's time is split in two, in CPU seconds of its process
(the machine running this is shared, so wall time would count other programs' turns): trnlab's part
(inside a kernel run: tracing, scheduling, costing, and in full mode the values) and the library's
harness (the rest: its input generators, its PyTorch references, its comparison); the cell gives the
largest of each over the row's tests. Issue 21's limit is on the first: a test stops when trnlab's
part passes {seconds} CPU s or the harness's passes {harness_seconds} CPU s, and the timeout names
whose part ran out (a test slow only in AWS's input generator is reported as the harness's). Each
file runs in a pytest session of its own, limited to
12 GiB of address space (a test over it fails with MemoryError: the harness's float64 inputs and
references at MoE sizes need more). SBUF tiles that do not fit are {spill}. A store of garbage
(never-written memory) into HBM leaves it undefined there, as on the chip (TRNLAB_GARBAGE_STORES=1: a
later store defines it; an output still holding it when read is the error). Simulated µs: the
launch's latency (LNC2 on trn2, as the harness launches: two physical cores; a test of several collective
ranks: all its ranks run at once, the latency is the last result on any rank). The QoR column gives the
library's own metric names (its `test/utils/qor_collector.py`), computed from trnlab's timeline by
`trnlab/nki/qor.py`, at the largest shape that ran. Results: pass / mismatch (the harness's
comparison failed) / error (first line) / timeout; "timed" = ran timing-only; "none" = no test of
that kind ran (all skipped by the harness, or none at those sizes).

**Platform**: the harness's `--platform-target` for the row. Every file runs on trn2; a file with
tests the library keeps off Trn2 — marked `@pytest.mark.platforms(exclude=[Platforms.TRN1,
Platforms.TRN2])`, or skipping themselves there ("MX is only supported on TRN3.") — gets a second
session of the harness with `--platform-target trn3` that runs those tests alone, with the same limits
(the MX, i.e. microscaling, kernels: NeuronCore-v4 only; the harness sets `NKI_NC_VERSION=gen4` for
each kernel, which trnlab's zero-edit hook reads: one or two Trn3 cores). A file none of whose tests
runs on trn2 has a trn3 row only.

The harness at this commit does not run in simulation mode as published; the plugin stands in for
what is missing: `test/utils/scripts/` and `test/utils/perf_analysis_private.py` (remote-hardware
locking and trace analysis, absent from the repository, unused on a CPU), `neuron_dtypes` (AWS's host
dtype helpers, served by the zero-edit hook), the orchestrator's `_compiled_kernel` (read after
simulation, set only by compilation) and, for tests of `collective_ranks` > 1, the simulation of all
ranks (the harness's simulation mode runs one rank: a `PerRankLazyInputGenerator` has no `.items()`):
every rank runs at once through `nki.multi_rank_run` on a trnlab Cluster, each with its own inputs,
and rank r's outputs go to `output_worker_<r>/`, where the harness's validator compares them with the
library's per-rank references.

Six files fail on the library's own code at this commit, on any backend (not worked around):
- `core/qkv/test_qkv_tkg.py` uses `Platforms` in a decorator without importing it (NameError when the
  file is imported);
- `core/attention/test_gen_mask_tkg.py`'s `_run_test` reads `kernel_input["mask_out_hbm"]` while its
  input generator names that key `"mask_out_hbm.must_alias_input"` (and `UnitTestFramework` passes the
  unfiltered dict): KeyError before any kernel runs (the file's `TestGenMaskTkgHbm` tests, which call
  the orchestrator directly, run);
- `core/mlp/test_mlp_cte.py`, `core/mlp/test_mlp_tkg.py` and `experimental/transformer/test_transformer_tkg.py`
  import `core/mlp/mlp.py`, whose line 203 repeats the end of a docstring after its closing quotes
  (IndentationError when the module is compiled, by any Python);
- `experimental/subkernels/test_topk_reduce.py` imports `nkilib.experimental.subkernels.topk_reduce`,
  a package the repository does not contain at this commit (ModuleNotFoundError).

The trn3 rows' failures, known. `nki.isa.quantize_mx` takes the OCP sample conversion's block scale,
as the library's tests of the instruction on the chip expect (AWS's 2.32 page says twice that:
docs/nki_compat.md, "Where AWS's page and its tests disagree"). `experimental/mxfp_subkernels/mxfp_load`'s
data and scales then equal its reference word by word; its test declares the x4 output float32 and
compares bits with its reference's words viewed as float32, as the chip's path reads the output file, so
the runner hands the harness an x4 output declared as another type as its bytes
(`benchmarks/nki_library_outputs.py`; docs/nki_compat.md, the NKI Library notes).
`core/subkernels/rmsnorm_mx_quantize_tkg`'s test wrapper copies 4 of every 32 scale partitions into
a new HBM output whose reference has zeros in the other 28 (never written: trnlab's error; AWS's
`nl.ndarray` page promises no initial contents; read as zeros, its 4 fast tests pass).
`core/moe_block/moe_block_tkg`'s and `core/moe/moe_cte/moe_bwmm_mx_cte`'s MX tests in full mode run past the
harness's limit in the library's input generator (a Python loop per 8 x 4 block), before any kernel; a
run of that file alone with a longer limit runs out of the runner's 12 GiB in the library's output
initialisation. `moe_bwmm_mx_cte`'s timing-only test traces through the kernel's `while reg:` (a loop
the device runs, docs/nki_compat.md) and is timed on Trn3, nothing spilled (the same with
`--no-spill`): next fit leaves its 48 KiB tile no gap beside the tiles live across the loop, so
device-loop programs are packed by size when next fit fails (docs/nki_compat.md, the compiled-loops
row).
`core/moe/moe_tkg`'s MX tests read
`.base_tensor` (an attribute of the library's `TensorView`) of a plain tensor.

The two cores of an LNC=2 launch share HBM as on the chip: every `nl.shared_hbm` tensor (the outputs
and a kernel's internal ones) is one tensor both cores read and write, ordered by their
`core_barrier`s, the write ending later in simulated time winning where both cores write one element
between two barriers (`trnlab/hardware/shared_hbm.py`); `nl.private_hbm` stays per core. `moe_cte`
and `moe_cte_unified` rely on it: both cores zero-fill the whole output, and `moe_cte_unified` passes
data between its cores through a `shared_hbm` tensor behind `core_barrier`.
"""


def timing_summary(records: list[dict]) -> str:
    """How many production shapes the files list and how many were timed; the slowest costing (trnlab's
    part) and the slowest harness part, in CPU seconds; the timeouts by whose part ran out."""
    listed = sum(r.get("production", 0) for r in records if r["mode"] == "census")
    timing = [r for r in records if r["mode"] == "timing" and r["outcome"] != "skipped"]
    timed = [r for r in timing if r["outcome"] == "timed"]
    split = [r for r in timing if "trnlab_cpu_s" in r]
    slowest = max(split, key=lambda r: r["trnlab_cpu_s"], default=None)
    harness = max(split, key=lambda r: r["harness_cpu_s"], default=None)
    out = [r for r in records if r["outcome"] == "timeout"]
    ours = sum("trnlab" in r["error"] for r in out)
    text = f"production shapes: {listed} listed, {len(timing)} run timing-only, {len(timed)} timed"
    if slowest:
        text += (f"; slowest costing {slowest['trnlab_cpu_s']:.1f} CPU s (trnlab) in "
                 f"`{slowest['nodeid'].split('/')[-1]}`, slowest harness part {harness['harness_cpu_s']:.1f} CPU s in "
                 f"`{harness['nodeid'].split('/')[-1]}`")
    return text + f"; timeouts: {ours} in trnlab's costing, {len(out) - ours} in the library's harness or the backstop"


def timed_rule(args) -> str:
    """Which production shapes a run times, in words."""
    which = "every one" if args.max_timed <= 0 else f"up to {args.max_timed}"
    rule = f"{which} per file, those AWS marks `fast` first"
    if args.timed_budget > 0:
        rule += (f", each while the file's timing-only tests so far used less than {args.timed_budget:g} CPU s "
                 f"(the rest left out)")
    return rule


def render(rows: list, records: list, args, commit: str, command: str, missing: list[str] = ()) -> str:
    census = records
    # by test file (sessions run at once, --jobs, interleave their lines), in run order within one
    records = sorted((r for r in records if r["mode"] != "census"), key=lambda r: r["nodeid"].split("::")[0])
    errors: dict = {}
    for r in records:
        if r["outcome"] in ("error", "mismatch", "timeout"):
            errors.setdefault(r["error"][:160], []).append(r["nodeid"].split("::")[0].split("/")[-1])
    summary = "\n".join(f"| {len(files)} | {err.replace('|', '/')} | {', '.join(sorted(set(files)))} |"
                        for err, files in sorted(errors.items(), key=lambda kv: -len(kv[1])))
    passed = sum(r["outcome"] == "passed" for r in records)
    timed = sum(r["outcome"] == "timed" for r in records)
    spill = "refused (--no-spill)" if args.no_spill else ("spilled to HBM as AWS's compiler would (TRNLAB_SPILL=1), "
                                                          "PSUM accumulators copied out once final "
                                                          "(TRNLAB_PSUM_EVACUATION=1)")
    return (f"# AWS's NKI Library on trnlab\n\nProduced by `{command}` on library commit `{commit}` "
            f"({time.strftime('%Y-%m-%d', time.gmtime())}): {len({r['kernel'] for r in rows})} test files, {len(records)} tests run, "
            f"{passed} passed in full mode, {timed} ran timing-only.\n\n{timing_summary(census)}.\n\n"
            + (f"The run stopped before these {len(missing)} test files (no row): {', '.join(missing)}.\n\n"
               if missing else "")
            + PREAMBLE.format(max_fast=args.max_fast if args.max_fast > 0 else "all" if args.max_fast == 0 else "none", timed_rule=timed_rule(args),
                              seconds=f"{args.seconds:g}", harness_seconds=f"{args.harness_seconds:g}", spill=spill)
            + f"\n{table(rows)}\n\n## Errors, by first line\n\n| tests | error | test files |\n|---|---|---|\n"
            f"{summary}\n\n## Every test run\n\n{details(records)}\n")


def file_row(name: str, platform: str, records: list[dict]) -> dict:
    """The table's row of one test file's records (and its census line) on one platform."""
    imported = [r for r in records if r["mode"] == "import"]
    census = next((r for r in records if r["mode"] == "census"), {})
    row = {"kernel": name, "platform": platform, "qor": ""}
    for mode in ("full", "timing"):
        summary = summarize(records, mode)
        tail = imported[0]["error"] if imported else ""
        row[mode] = result_cell(summary, tail, 2 if imported else 0, mode,
                                census.get("production") if mode == "timing" else None)
        row[mode + "_us"] = time_cell(summary)
        row[mode + "_cpu"] = cpu_cell(summary)
        row["qor"] = qor_cell(summary) or row["qor"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, type=Path, help="a checkout of aws-neuron/nki-library")
    parser.add_argument("-k", dest="pattern", help="only test files whose path contains this")
    parser.add_argument("--start", help="only the test files from the first whose path contains this on")
    parser.add_argument("--max-fast", type=int, default=4, help="fast tests per file in full mode (0: all, -1: none)")
    parser.add_argument("--max-timed", type=int, default=0,
                        help="production-shape tests per file, timing-only (0: all, within --timed-budget)")
    parser.add_argument("--timed-budget", type=float, default=10,
                        help="CPU s per file for its timing-only tests: the next runs while they used less (0: no budget)")
    parser.add_argument("--seconds", type=float, default=60, help="limit per test on trnlab's part, CPU s")
    parser.add_argument("--harness-seconds", type=float, default=90,
                        help="limit per test on the library's harness (its inputs, references), CPU s")
    parser.add_argument("--platform", default="trn2", help="the harness's --platform-target")
    parser.add_argument("--jobs", type=int, default=1, help="test files run at once (each in its own session)")
    parser.add_argument("--no-trn3-pass", action="store_true",
                        help="do not run, on trn3, the tests the library keeps off --platform (its MX tests)")
    parser.add_argument("--no-spill", action="store_true", help="refuse SBUF and PSUM overflows (TRNLAB_SPILL=0, TRNLAB_PSUM_EVACUATION=0)")
    parser.add_argument("--full-large", action="store_true",
                        help="run the production-shape tests in full mode too (values compared), not timing-only")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--results", type=Path, help="JSON lines of every test (default: a file in /tmp)")
    parser.add_argument("--render", type=Path, help="make the table from this results file, running nothing")
    parser.add_argument("--plugin", action="append", default=[], help="extra pytest plugin (development)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="nkilib-"))
    commit = copy_library(args.library.resolve(), work)
    rows, started, code = [], time.time(), 0
    paths = test_files(work, args.pattern, args.start)
    if args.render:
        results = args.render
    else:
        results = args.results or work / "results.jsonl"
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text("")
        code = run_files(work, paths, results, args, args.plugin)
    records = [json.loads(ln) for ln in results.read_text().splitlines()]
    missing = []                # rendering a run that stopped early: the files it did not reach
    for path in paths:
        name = kernel_name(work, path)
        rel = str(path.relative_to(work / "test"))
        mine = [r for r in records if r["nodeid"].split("::")[0].endswith(rel)]
        if args.render and not mine:
            missing.append(name)
            continue
        second = [r for r in mine if r.get("platform", args.platform) == SECOND_PLATFORM != args.platform]
        first = [r for r in mine if r not in second]
        for platform, those in ((args.platform, first), (SECOND_PLATFORM, second)):
            ran = [r for r in those if r["outcome"] != "skipped" and r["mode"] != "census"]
            if platform == SECOND_PLATFORM != args.platform and not [r for r in those if r["mode"] != "census"]:
                continue                # no second pass for this file
            if platform == args.platform and second and not ran:
                continue                # nothing ran on the first platform: the trn3 row says it all
            rows.append(row := file_row(name, platform, those))
            print(f"{name:50s} {platform:5s} {row['full'][:70]:70s} {row['full_us']:>14s} | "
                  f"{row['timing'][:40]:40s} {row['timing_us']:>10s}", flush=True)
    options = [f"--library {shlex.quote(str(args.library))}"] + ([f"-k {shlex.quote(args.pattern)}"] if args.pattern else []) \
        + [f"--max-fast {args.max_fast}", f"--max-timed {args.max_timed}", f"--timed-budget {args.timed_budget:g}",
           f"--seconds {args.seconds:g}", f"--harness-seconds {args.harness_seconds:g}"] \
        + ([f"--platform {args.platform}"] if args.platform != "trn2" else []) \
        + (["--no-spill"] if args.no_spill else []) + (["--full-large"] if args.full_large else []) \
        + (["--no-trn3-pass"] if args.no_trn3_pass else []) \
        + ([f"--out {args.out}"] if args.out else [])
    command = "python benchmarks/nki_library.py " + " ".join(options)
    tests = [r for r in records if r["mode"] != "census"]
    print(f"\n{len(rows)} rows, {len(tests)} tests, {time.time() - started:.0f} s; results: {results}")
    print(timing_summary(records))
    if args.out:
        args.out.write_text(render(rows, records, args, commit, command, missing))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if code in (0, 1) else code


if __name__ == "__main__":
    sys.exit(main())
