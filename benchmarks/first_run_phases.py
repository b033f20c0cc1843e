"""Where the first trace of AWS's tiled matmul goes, in machine instructions per phase.

CPU seconds on a shared machine move with its load; the instructions a process executes do not.
This runs valgrind's cachegrind (``--cache-sim=no``: only ``I refs``, the instructions executed) on
fresh processes of one trnlab tree: each phase of the list schedule run twice on the program-order
trace of ``nki_matmul_tiled_`` (AWS's nki-samples, read from the mirror like `bench_first_run.py`),
minus the same process running it zero times; and the whole trace (list schedule, and program
order) minus a process that traces nothing. Differences under ~10 M instructions are run-to-run
noise (the hash seed). benchmarks/README.md (bench_first_run) has the table and what it bounds.

    python benchmarks/first_run_phases.py                        # this tree, 4096³
    python benchmarks/first_run_phases.py --tree /tmp/before     # another trnlab tree
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_first_run import MIRROR, tutorial_file      # noqa: E402

PHASES = ("static", "resolve", "graph", "list_order", "reorder")

# run under valgrind: `phase` `reps` times (or the whole trace, `trace-list` / `trace-program`)
CHILD = r"""
import copy, gc, importlib.util, sys
from trnlab.nki import zero_edit
zero_edit.install()
import trnlab.nki as nki
from trnlab.hardware import allocate, list_schedule, replay_timing
from trnlab.hardware.fast import list_schedule as fast_schedule, resolve as fast_resolve
import trnlab.hardware.trace, trnlab.hardware.describe, trnlab.hardware.fusion, trnlab.hardware.instruction_order
path, n, phase, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
spec = importlib.util.spec_from_file_location("matrix_multiplication_nki_kernels", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kernel, shape = module.nki_matmul_tiled_, nki.ShapeDtype((n, n), "bfloat16")
if phase.startswith("trace"):
    nki.SCHEDULE = "program" if phase == "trace-program" else nki.SCHEDULE
    for _ in range(reps):
        nki.trace(kernel, shape, shape, target="trn2")
    raise SystemExit
nki.SCHEDULE = "program"
program = nki.trace(kernel, shape, shape, target="trn2")
gc.disable()
core = allocate.target_spec(program, None)
compiled = replay_timing.compiled_for(program, core)
static = replay_timing._static(program, compiled.written)
resolved = fast_resolve.resolve(program, compiled.issues, core, list_schedule._FRESH, static)

def fresh():
    p = copy.copy(program)
    p.__dict__.pop("_derived", None)
    compiled._resolved.clear()
    p.derived.put("compiled", {core: compiled})
    return p
order, hidden, used = fast_schedule.list_order(fresh(), None)
for _ in range(reps):
    if phase == "static":
        replay_timing._static(program, compiled.written)
    elif phase == "resolve":
        fast_resolve.resolve(program, compiled.issues, core, list_schedule._FRESH, static)
    elif phase == "graph":
        fast_schedule._graph(program, resolved)
    elif phase == "list_order":                 # resolve + graph + simulation
        fast_schedule.list_order(fresh(), None)
    elif phase == "reorder":
        fast_schedule.reorder_kept(program, order, "list", hidden, used)
"""


def instructions(tree: Path, path: str, n: int, phase: str, reps: int) -> int:
    """Instructions a fresh process of `tree`'s trnlab executes (valgrind cachegrind's I refs)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("TRNLAB_FAST", None)
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           os.path.realpath(sys.executable), "-c", CHILD, path, str(n), phase, str(reps)],
                          capture_output=True, text=True, env=env)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"{phase} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent), help="a trnlab tree")
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    tree, n = Path(args.tree), args.size
    with tempfile.TemporaryDirectory() as workdir:
        path = tutorial_file(None, args.mirror, workdir)
        print(f"{n}^3, {tree}: million instructions")
        base = instructions(tree, path, n, "none", 0)
        for phase in PHASES:
            print(f"  {phase:28s}{(instructions(tree, path, n, phase, 2) - base) / 2e6:8.0f}")
        nothing = instructions(tree, path, n, "trace-list", 0)
        for phase in ("trace-list", "trace-program"):
            print(f"  {phase:28s}{(instructions(tree, path, n, phase, 1) - nothing) / 1e6:8.0f}")


if __name__ == "__main__":
    main()
