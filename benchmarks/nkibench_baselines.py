"""Benchmark: the NKIBench kernels (AccelOpt, 2025) against their published trn1 latencies, run unmodified.

AccelOpt (github zhang677/AccelOpt; arXiv 2511.15915, MLSys 2026) publishes 14 NKI kernels in the style
neuronx-cc dumps them (`NKIBench/kernels/<problem>_0.py`: beta-1 `neuronxcc.nki`, every index and mask its
own `nl.arange` call, PSUM accumulators as `nl.zeros(..., lazy_initialization=True)` block tensors) and
their measured latencies (`experiments/full_complete_local/profile_results.csv`: trn1.32xlarge, fp32,
compiled with `--disable-dge --logical-nc-config=1`, the mean of 10 `neuron-profile` `total_time`s; with
the Scalar and Vector engines' active fractions). Nothing was fitted to them.

This script reads each kernel and the published figures from a bare git mirror of AccelOpt (`--accelopt
GITDIR`; nothing of AccelOpt is in this repository), imports the kernel unmodified through the zero-edit
hook and runs it timing-only on the Trn1 preset, on shape-only arguments of the shapes AccelOpt's
references pass (`transform_to_nki_inputs`), one fresh process per kernel, one at a time (the largest take
10 GB). The compiler flags have no counterpart here. Printed: published and trnlab latency, the error, the
Scalar (ACT) and Vector (DVE) engines' active % of both, or the error a kernel stops with.

    python benchmarks/nkibench_baselines.py --accelopt /work/.mirror/zhang677+AccelOpt/repo
    python benchmarks/nkibench_baselines.py --only silu adamw
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIRROR = "/work/.mirror/zhang677+AccelOpt/repo"
RESULTS = "experiments/full_complete_local/profile_results.csv"
EPS = 1e-5
# problem -> the kernel's arguments, as each reference's transform_to_nki_inputs shapes them (fp32)
ARGUMENTS = {
    "swiglu": [(8, 4, 128, 8, 128), (8, 128, 3072), (24, 128, 1024), (8, 128, 3072)],
    "matmul_add_rmsnorm": [(4096, 2048), (2048, 2048), EPS, (4096, 2048), (2048,)],
    "add_rmsnorm_matmul": [(4096, 1024), (1024, 2048), EPS, (4096, 1024), (1024,)],
    "matmul": [(32, 128, 40, 128), (40, 128, 12288)],
    "gqa_full": [(32, 128, 16, 128), (1, 8, 4, 128, 8, 128), (1, 32, 128, 1024)],
    "rmsnorm_matmul": [(32, 128, 1024), (8, 128, 2048)],
    "rope_single_freq_apply": [(128, 64 * 4096), (64, 64 * 4096), (64, 64 * 4096)],
    "bmm": [(16, 4096, 64), (16, 64, 4096)],
    "bmm_softmax": [(16, 4096, 64), (16, 64, 4096)],
    "transpose_matmul": [(128, 16, 4096), (128, 16, 10944)],
    "lora": [(8, 4, 128, 40, 128), (40, 128, 12288), (40, 128, 128), (128, 12288)],
    "adamw": [(10944, 2048)] * 4,
    "silu": [(128, 32, 7168)],
    "mamba": [(256, 7168), (256, 7168), (256, 16), (16, 7168), (16, 7168)],
}
SKIP = {"lora": "its timing-only trace needs more memory than a 24 GB machine has"}

CHILD = r"""
import importlib.util, json, sys, traceback
from trnlab.nki import zero_edit
zero_edit.install()
import numpy as np
import trnlab.nki as nki
path, arguments = sys.argv[1], json.loads(sys.argv[2])
out = {}
try:
    spec = importlib.util.spec_from_file_location("nkibench_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = getattr(module, "kernel", None) or getattr(module, "optimized_kernel")   # as kernel_wrapper.py
    args = [nki.ShapeDtype(tuple(a), np.float32) if isinstance(a, list) else a for a in arguments]
    run = nki.run(kernel, *args, target="trn1", timing_only=True)
    active = run.profile().active
    out = {"latency_ms": run.latency_us / 1e3, "act": 100 * active.get("act", 0.0), "dve": 100 * active.get("dve", 0.0)}
except Exception as error:
    out = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
           "where": [line for line in traceback.format_exc().splitlines() if "kernel line" in line][-1:]}
print(json.dumps(out))
"""


def git_show(mirror: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", mirror, "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


def published(mirror: str) -> dict:
    """problem -> (kernel file name, latency ms, Scalar-engine active %, Vector-engine active %)."""
    rows = {}
    for row in csv.DictReader(io.StringIO(git_show(mirror, RESULTS))):
        profile = json.loads(row["profile"])
        rows[row["problem"]] = (Path(row["kernel"]).name, profile["latency"],
                                100 * profile["scalar_engine_active_time_percent"],
                                100 * profile["vector_engine_active_time_percent"])
    return rows


def run_one(mirror: str, kernel_file: str, problem: str, workdir: str) -> dict:
    path = Path(workdir) / kernel_file
    path.write_text(git_show(mirror, f"NKIBench/kernels/{kernel_file}"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(ARGUMENTS[problem])],
                          capture_output=True, text=True, env=env, cwd=workdir)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"the process ended with {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelopt", default=MIRROR, help="a bare git mirror of zhang677/AccelOpt")
    parser.add_argument("--only", nargs="+", choices=list(ARGUMENTS), help="these problems only")
    args = parser.parse_args()
    figures = published(args.accelopt)
    print("NKIBench baselines (AccelOpt): published trn1 latency (mean of 10 neuron-profile runs, fp32) "
          "against trnlab's Trn1 preset, timing-only; ACT / DVE: Scalar / Vector engine active %")
    print(f"{'problem':24s}{'published':>11s}{'trnlab':>11s}{'error':>8s}   ACT pub/ours   DVE pub/ours")
    with tempfile.TemporaryDirectory() as workdir:
        for problem in args.only or list(ARGUMENTS):
            kernel_file, latency, act, dve = figures[problem]
            if problem in SKIP and not args.only:
                print(f"{problem:24s}{latency:8.3f} ms   skipped: {SKIP[problem]} (--only {problem} runs it)")
                continue
            r = run_one(args.accelopt, kernel_file, problem, workdir)
            if "error" in r:
                print(f"{problem:24s}{latency:8.3f} ms   stopped: {r['error']} {' '.join(r.get('where', []))}")
                continue
            print(f"{problem:24s}{latency:8.3f} ms{r['latency_ms']:8.3f} ms{r['latency_ms'] / latency - 1:+8.0%}"
                  f"   {act:5.1f} / {r['act']:5.1f}   {dve:5.1f} / {r['dve']:5.1f}", flush=True)


if __name__ == "__main__":
    main()
