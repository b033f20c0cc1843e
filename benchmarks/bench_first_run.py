"""Benchmark: the first run of AWS's tutorial tiled matmul, unmodified, at 4096³ and 8192³.

AWS's ``nki_matmul_tiled_`` (aws-neuron/nki-samples,
``src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py``) is loaded
from a checkout (``--samples DIR``) or from a bare git mirror (``--mirror GITDIR``, read with
``git show HEAD:<path>`` into a temporary directory, never into this repository) and imported
through the zero-edit hook (`trnlab.nki.zero_edit`): its ``import nki`` lines are served by
trnlab.nki, nothing in it is changed.

Each shape is measured in a **fresh process** (a child of this one), so no cache of trnlab's — the
program cache, the loop stamper's builders, the rule checks per tile shape — is warm: what a user
running the kernel for the first time pays. Per shape, bf16, timing-only on the Trn2 preset, CPU
seconds of the child (`time.process_time`, so a busy machine's other jobs do not count):

- trace: `nki.trace` — the kernel's Python, with its affine loops traced in iterations 0, 1 and n-1
  and stamped between (`trnlab/nki/loops.py`), the allocation, and the default schedule (the list
  schedule up to `instruction_order.LIST_LIMIT` instructions, program order above);
- trace + first replay: then `nki.run(..., timing_only=True)` — the first launch on a fresh core,
  which resolves the program once into its flat form (what calling the kernel costs the first time);
- baseline, in the same run: the same trace with ``TRNLAB_FAST=0`` (every loop iteration traced:
  the reference path), and the stamped trace in program order (``nki.SCHEDULE = "program"``: the
  trace alone, without the list schedule).

Printed: instructions, CPU seconds, instructions per CPU second, the target (issue 25: >= 200,000/s
at 8192³, >= 100,000/s at 4096³, the fixed cost per trace included) and the ratio to the baseline.

    python benchmarks/bench_first_run.py --samples ~/nki-samples
    python benchmarks/bench_first_run.py --mirror /work/.mirror/aws-neuron+nki-samples/repo
    python benchmarks/bench_first_run.py --sizes 2048      # a quick run
    python benchmarks/bench_first_run.py --sizes 4096 --before /tmp/before   # before/after, same run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TUTORIAL = "src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py"
OLD_TUTORIAL = "src/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py"   # older layout
MIRROR = "/work/.mirror/aws-neuron+nki-samples/repo"
KERNEL = "nki_matmul_tiled_"
TARGETS = {4096: 100_000, 8192: 200_000}
REPO = Path(__file__).resolve().parent.parent

# run in the child: one measurement in a fresh interpreter, printed as one JSON line
CHILD = r"""
import json, sys, time, importlib.util
from trnlab.nki import zero_edit
zero_edit.install()
import trnlab.nki as nki
from trnlab import config
from trnlab.nki import loops
path, n, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spec = importlib.util.spec_from_file_location("matrix_multiplication_nki_kernels", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kernel = getattr(module, "nki_matmul_tiled_")
lhsT = rhs = nki.ShapeDtype((n, n), "bfloat16")
out = {}
if phase == "concrete":
    with config.override(fast=False):
        cpu = time.process_time()
        program = nki.trace(kernel, lhsT, rhs, target="trn2")
        out["trace_s"] = time.process_time() - cpu
elif phase == "program_order":
    nki.SCHEDULE = "program"
    cpu = time.process_time()
    program = nki.trace(kernel, lhsT, rhs, target="trn2")
    out["trace_s"] = time.process_time() - cpu
else:
    cpu = time.process_time()
    program = nki.trace(kernel, lhsT, rhs, target="trn2")
    out["trace_s"] = time.process_time() - cpu
    run = nki.run(kernel, lhsT, rhs, target="trn2", timing_only=True)
    out["run_s"] = time.process_time() - cpu
    out["simulated_ms"] = run.launch.latency_ns / 1e6
out["instructions"] = len(program)
out["schedule"] = program.schedule or "program"
out["fallbacks"] = [reason for _, reason in loops.fallbacks]
print(json.dumps(out))
"""


# the machine's own speed, so figures of different machines can be set side by side: a fixed pure-Python
# loop (the kind of work the trace does: integer arithmetic, attribute-free bytecode) in a fresh process
REFERENCE = r"""
import time
cpu = time.process_time()
total = 0
for i in range(5_000_000):
    total += i & 7
print(time.process_time() - cpu)
"""


def reference_loop_s() -> float:
    """CPU seconds of REFERENCE in a fresh interpreter (the best of three)."""
    return min(float(subprocess.run([sys.executable, "-c", REFERENCE], capture_output=True, text=True,
                                    check=True).stdout) for _ in range(3))


def tutorial_file(samples: str | None, mirror: str | None, workdir: str) -> str:
    """The path of AWS's tutorial kernels file: in the checkout, or written from the mirror's HEAD."""
    if samples:
        for rel in (TUTORIAL, OLD_TUTORIAL):
            if (Path(samples) / rel).is_file():
                return str(Path(samples) / rel)
        raise SystemExit(f"no {TUTORIAL} (or {OLD_TUTORIAL}) under --samples {samples}")
    for rel in (TUTORIAL, OLD_TUTORIAL):
        shown = subprocess.run(["git", "--git-dir", mirror, "show", f"HEAD:{rel}"], capture_output=True)
        if shown.returncode == 0:
            path = os.path.join(workdir, "matrix_multiplication_nki_kernels.py")
            Path(path).write_bytes(shown.stdout)
            return path
    raise SystemExit(f"no {TUTORIAL} at HEAD of the mirror {mirror}")


def measure(path: str, n: int, phase: str, repo: Path = REPO) -> dict:
    """One phase at n³ in a fresh Python process (`repo`'s trnlab first on its path: this
    repository's unless another tree is compared)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    env.pop("TRNLAB_FAST", None)
    done = subprocess.run([sys.executable, "-c", CHILD, path, str(n), phase], capture_output=True, text=True,
                          env=env, cwd=str(repo))
    if done.returncode != 0:
        raise SystemExit(f"{phase} at {n}^3 failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", help="a checkout of aws-neuron/nki-samples")
    parser.add_argument("--mirror", default=MIRROR, help="a bare git mirror of it (used without --samples)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--no-concrete", action="store_true", help="skip the TRNLAB_FAST=0 baseline (slow at 8192)")
    parser.add_argument("--before", metavar="TREE",
                        help="another trnlab tree (e.g. `git worktree add /tmp/before <commit>`): its first run "
                             "and this tree's, alternating in fresh processes, --repeat times each")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.before:
        with tempfile.TemporaryDirectory() as workdir:
            compare(tutorial_file(args.samples, args.mirror, workdir), args.sizes, Path(args.before), args.repeat)
        return
    with tempfile.TemporaryDirectory() as workdir:
        path = tutorial_file(args.samples, args.mirror, workdir)
        print(f"AWS's {KERNEL} from {args.samples or args.mirror}, bf16, Trn2, timing-only; "
              f"each figure a fresh process (no warm cache), CPU seconds of that process")
        print(f"this machine: the reference loop (5 M iterations of pure Python) takes {reference_loop_s():.2f} CPU s")
        for n in args.sizes:
            first = measure(path, n, "first")
            plain = measure(path, n, "program_order")
            concrete = None if args.no_concrete else measure(path, n, "concrete")
            k = first["instructions"]
            target = TARGETS.get(n)
            rate = k / first["trace_s"]
            aim = f"target >= {target:,}: {'met' if rate >= target else 'NOT met'}" if target else "no target"
            print(f"{n}^3: {k:,} instructions, schedule {first['schedule']!r}, "
                  f"simulated {first['simulated_ms']:.2f} ms, loop fallbacks: {first['fallbacks'] or 'none'}")
            print(f"  {'trace':26s}{first['trace_s']:7.2f} CPU s {rate:10,.0f} instr/CPU s  ({aim})")
            print(f"  {'trace + first replay':26s}{first['run_s']:7.2f} CPU s {k / first['run_s']:10,.0f} instr/CPU s")
            print(f"  {'trace, program order':26s}{plain['trace_s']:7.2f} CPU s {k / plain['trace_s']:10,.0f} "
                  f"instr/CPU s  (no list schedule)")
            if concrete is not None:
                print(f"  {'trace, TRNLAB_FAST=0':26s}{concrete['trace_s']:7.2f} CPU s "
                      f"{k / concrete['trace_s']:10,.0f} instr/CPU s  (every iteration traced; the trace is "
                      f"{concrete['trace_s'] / first['trace_s']:.1f}x faster)")


def compare(path: str, sizes: list[int], before: Path, repeat: int) -> None:
    """The first run (trace; trace + first replay) of `before`'s trnlab and this one's, alternating
    fresh processes (so a busy machine's drift touches both alike); medians of CPU seconds."""
    import statistics
    print(f"AWS's {KERNEL}, first run: {before} (before) vs {REPO} (after), {repeat} alternating fresh "
          f"processes each, median CPU seconds")
    for n in sizes:
        runs: dict = {"before": [], "after": []}
        for _ in range(repeat):
            for name, repo in (("before", before), ("after", REPO)):
                runs[name].append(measure(path, n, "first", repo))
        k = runs["after"][0]["instructions"]
        for phase, label in (("trace_s", "trace"), ("run_s", "trace + first replay")):
            b = statistics.median(r[phase] for r in runs["before"])
            a = statistics.median(r[phase] for r in runs["after"])
            print(f"{n}^3 {label:22s} before {b:6.3f} CPU s {k / b:10,.0f}/s   after {a:6.3f} CPU s "
                  f"{k / a:10,.0f}/s   {b / a:4.2f}x")


if __name__ == "__main__":
    main()
