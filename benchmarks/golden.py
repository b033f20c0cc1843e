"""A refactoring guard: hash every timeline record and every output byte of a fixed corpus of runs.

    python benchmarks/golden.py --save /tmp/base.json     # on the commit you start from
    python benchmarks/golden.py --check /tmp/base.json    # after a change: which cases moved
    TRNLAB_FAST=0 python benchmarks/golden.py --check /tmp/base.json   # the reference backend too

The corpus: each of trnlab's own kernels (`trnlab.kernels.KERNELS`, tiny-GPT sizes, seeded inputs)
in full mode (fp32 on Trn1 and Trn2, bf16 on Trn2 and Trn3) and timing-only at larger sizes, and AWS's tutorial shape of a tiled matmul (fresh SBUF tiles per K
step) timing-only at sizes where the list schedule reorders and where tiles wrap SBUF. A change
meant to keep behaviour (a fast path, a refactor) must keep every hash; a change of the model moves
the cases it should and names them here. Not a test: the hashes depend on NumPy's BLAS rounding
only through the outputs, and are compared on one machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys

import numpy as np

import trnlab.nki as nki
from trnlab.hardware import dtypes
from trnlab.kernels import KERNELS
from trnlab.kernels.matmul_ladder import matmul_tiled      # AWS's tutorial shape: fresh SBUF tiles per K step
from trnlab.kernels.workload import gpt_arguments


MATMUL_SHAPES = [(256, 128, 512), (1024, 1024, 1024), (2048, 1024, 1024), (2048, 2048, 2048)]


def _values(args: tuple, seed: int) -> list:
    """Seeded values for each ShapeDtype argument (ints as small indices), other arguments as given."""
    rng = np.random.default_rng(seed)
    out = []
    for a in args:
        if isinstance(a, nki.ShapeDtype):
            dtype = dtypes.as_dtype(a.dtype)
            if np.issubdtype(dtype, np.integer):
                out.append(rng.integers(0, 64, size=a.shape).astype(dtype))
            else:
                out.append(rng.standard_normal(a.shape).astype(np.float32).astype(dtype))
        else:
            out.append(a)
    return out


def _hash_run(run) -> str:
    h = hashlib.sha256()
    for record in run.timeline:
        h.update(repr(dataclasses.astuple(record) if dataclasses.is_dataclass(record) else record).encode())
    outputs = run.outputs
    for out in (outputs if isinstance(outputs, (tuple, list)) else [outputs]):
        if out is not None:
            array = np.ascontiguousarray(np.asarray(out))
            h.update(str(array.dtype).encode() + str(array.shape).encode() + array.tobytes())
    h.update(repr(run.latency_ns).encode())
    return h.hexdigest()


def cases():
    """(name, thunk) of every case; the thunk returns a KernelRun."""
    for dtype, targets in (("float32", ("trn2", "trn1")), ("bfloat16", ("trn2", "trn3"))):
        args = gpt_arguments(batch=2, seq=128, d_model=128, n_head=4, vocab=64, dtype=dtype)
        for target in targets:
            for i, (name, (kernel, _)) in enumerate(KERNELS.items()):
                yield (f"{name} {dtype} {target}",
                       lambda kernel=kernel, a=args[name], i=i, target=target:
                       nki.run(kernel, *_values(a, i), target=target))
    big = gpt_arguments(batch=4, seq=512, d_model=512, n_head=8, vocab=512)
    for name, (kernel, _) in KERNELS.items():
        yield (f"{name} bfloat16 large trn2",
               lambda kernel=kernel, a=big[name]: nki.run(kernel, *a, target="trn2", timing_only=True))
    for target in ("trn2", "trn1"):
        for k, m, n in MATMUL_SHAPES:
            yield (f"tiled {k}x{m}x{n} {target}",
                   lambda k=k, m=m, n=n, target=target:
                   nki.run(matmul_tiled, nki.ShapeDtype((k, m), "bfloat16"), nki.ShapeDtype((k, n), "bfloat16"),
                           target=target, timing_only=True))


def compute() -> dict[str, str]:
    result = {}
    for name, thunk in cases():
        try:
            result[name] = _hash_run(thunk())
        except Exception as error:            # an error is a result too: it must stay the same error
            result[name] = f"error: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", help="write the corpus's hashes to this JSON file")
    group.add_argument("--check", help="compare with the hashes in this JSON file")
    args = parser.parse_args()
    hashes = compute()
    if args.save:
        with open(args.save, "w") as f:
            json.dump(hashes, f, indent=1, sort_keys=True)
        errors = sum(v.startswith("error") for v in hashes.values())
        print(f"saved {len(hashes)} cases ({errors} errors) to {args.save}")
        return 0
    with open(args.check) as f:
        base = json.load(f)
    moved = [n for n in base if hashes.get(n) != base[n]]
    for name in moved:
        print(f"moved: {name}" + (f"  ({hashes.get(name)})" if str(hashes.get(name)).startswith("error") else ""))
    print(f"{len(base) - len(moved)}/{len(base)} unchanged")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
