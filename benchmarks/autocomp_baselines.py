"""Benchmark: AWS's kernels as UC Berkeley's Autocomp measured them on a trn1.2xlarge, run here unmodified.

Autocomp (github ucb-bar/autocomp; blog posts of 2025-11-03 and 2025-11-17) optimizes NKI kernels on a
trn1.2xlarge and keeps, for each search, a trace whose root candidate is the kernel it started from,
with its measured latency (`score`, ms): AWS's tutorial and Neuron-team kernels, as published in
aws-neuron/nki-samples. Its harness of the blog's date (commit fd3a5ec, `tests/trn-*/N_*_test.py`)
checks the candidate against a reference and times it with `nki.benchmark(warmup=2, iters=10)`, P99
of `nc_latency`. Nothing was fitted to these figures: they are published after trnlab's constants were
set, and they are a check, not a calibration row.

This script reads each root kernel out of the trace and the harness out of the same mirror (`--autocomp
GITDIR`, a bare git mirror; nothing of Autocomp is in this repository), puts the kernel where the
harness says `# SUBSTITUTE HERE`, and runs the result with `python -m trnlab.nki run` on the Trn1
preset (`NEURON_PLATFORM_TARGET_OVERRIDE=trn1`), one fresh process per kernel. The harness is run as
published, except for the 8192-sized matmul, whose correctness check (two full-size matmuls in full
mode) is skipped: its benchmark runs on `nt.tensor[[8192, 4096], nl.bfloat16]` arguments, timing-only
as on the chip. Printed: the published P99, trnlab's, the error, and whether the harness's check passed.

    python benchmarks/autocomp_baselines.py --autocomp /work/.mirror/ucb-bar+autocomp/repo
    python benchmarks/autocomp_baselines.py --only mamba sd_attention
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIRROR = "/work/.mirror/ucb-bar+autocomp/repo"
HARNESS_COMMIT = "fd3a5ec8270e0ebf335f4f03a4fd581d92f6c216"       # 2025-11-03, the first blog post's date

# name: (trace with the measured root, harness, what it runs)
KERNELS = {
    "gemm": ("examples/trn-tutorial/2_gemm_trace.py", "tests/trn-tutorial/2_gemm_test.py",
             "AWS's tutorial nki_matmul_tiled_, lhsT [8192, 4096] @ rhs [8192, 8192], bf16"),
    "mamba": ("examples/trn-tutorial/3_mamba_trace.py", "tests/trn-tutorial/3_mamba_test.py",
              "AWS's fused-Mamba tutorial mamba_v1, batch 1, channels 256, seq 2048, state 16, fp32"),
    "attention": ("examples/trn-tutorial/4_attention_trace.py", "tests/trn-tutorial/4_attention_test.py",
                  "AWS's attention tutorial attn_fwd_v3, d_head 128, seq 4096, bf16"),
    "sd_attention": ("examples/trn-tutorial/5_sd_attention_trace.py", "tests/trn-tutorial/5_sdattention_test.py",
                     "AWS's fused_self_attn_for_SD_small_head_size, seq 4096, d_head 64, fp32 in, bf16 matmuls"),
    "conv1d": ("examples/trn-advanced/4_conv1d_trace.py", "tests/trn-advanced/4_conv1d_test.py",
               "AWS's Neuron-team conv1d_depthwise_default, N 8, C 512, W 2048, filter 3, fp32"),
}
# the one harness line replaced (see the docstring)
SKIPPED_CHECK = {"gemm": ("test_result = test_nki(nki_matmul_block_free_dimension_, test)",
                          "test_result = True   # trnlab: the full-size correctness check skipped")}
# the same kernel at the same shape in AWS's matrix-multiplication tutorial table (trn1, 2024)
AWS_TUTORIAL_MS = {"gemm": 51.80}


def git_show(mirror: str, rev_path: str) -> str:
    return subprocess.run(["git", "--git-dir", mirror, "show", rev_path], capture_output=True, text=True,
                          check=True).stdout


def root_candidate(trace: str) -> tuple[str, float]:
    """The code and the published score (ms) of a trace's root candidate (`parent=None`)."""
    root = trace[trace.index("parent=None,"):]
    found = re.search(r"code='''(.*?)''',\s*score=([0-9.]+)", root, re.S)
    return ast.literal_eval("'''" + found.group(1) + "'''"), float(found.group(2))


def program(mirror: str, name: str) -> tuple[str, float]:
    trace, harness, _ = KERNELS[name]
    code, published = root_candidate(git_show(mirror, f"HEAD:{trace}"))
    text = git_show(mirror, f"{HARNESS_COMMIT}:{harness}")
    if "# SUBSTITUTE HERE" not in text:
        raise SystemExit(f"{harness} at {HARNESS_COMMIT[:7]} has no '# SUBSTITUTE HERE'")
    text = text.replace("# SUBSTITUTE HERE", code)
    if name in SKIPPED_CHECK:
        old, new = SKIPPED_CHECK[name]
        if old not in text:
            raise SystemExit(f"{harness}: the line to skip is not there: {old}")
        text = text.replace(old, new)
    return text, published


def run(mirror: str, name: str, workdir: str) -> dict:
    text, published = program(mirror, name)
    path = Path(workdir) / f"{name}.py"
    path.write_text(text)
    env = dict(os.environ, NEURON_PLATFORM_TARGET_OVERRIDE="trn1",
               PYTHONPATH=os.pathsep.join([str(REPO)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    done = subprocess.run([sys.executable, "-m", "trnlab.nki", "run", str(path)], capture_output=True,
                          text=True, cwd=workdir, env=env)
    latency = re.search(r"Latency: ([0-9.]+) ms \(P99\)", done.stdout)
    return {"name": name, "published": published, "ours": float(latency.group(1)) if latency else None,
            "checked": "skipped" if name in SKIPPED_CHECK else ("passed" if done.returncode == 0 else "failed"),
            "error": None if latency else (done.stdout + done.stderr)[-1500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--autocomp", default=MIRROR, help="a bare git mirror of ucb-bar/autocomp")
    parser.add_argument("--only", nargs="+", choices=list(KERNELS), help="these kernels only")
    parser.add_argument("--jobs", type=int, default=2, help="kernels run at once (each its own process)")
    args = parser.parse_args()
    names = args.only or list(KERNELS)
    with tempfile.TemporaryDirectory() as workdir, ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda n: run(args.autocomp, n, workdir), names))
    print("Autocomp's measured baselines (trn1.2xlarge, nki.benchmark P99) against trnlab's Trn1 preset")
    print(f"{'kernel':14s}{'published':>11s}{'trnlab':>10s}{'error':>8s}  check     what")
    for r in results:
        if r["ours"] is None:
            print(f"{r['name']:14s}{r['published']:9.3f} ms  did not run:\n{r['error']}")
            continue
        error = r["ours"] / r["published"] - 1
        print(f"{r['name']:14s}{r['published']:8.3f} ms{r['ours']:7.3f} ms{error:+8.0%}  {r['checked']:8s}  "
              f"{KERNELS[r['name']][2]}")
        if r["name"] in AWS_TUTORIAL_MS:
            aws = AWS_TUTORIAL_MS[r["name"]]
            print(f"{'':14s}{aws:8.3f} ms{'':10s}{r['ours'] / aws - 1:+8.0%}  (AWS's tutorial table, trn1, "
                  f"the same kernel and shape)")


if __name__ == "__main__":
    main()
