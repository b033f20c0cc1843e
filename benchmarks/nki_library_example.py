"""Make notebook 05's "run AWS's production kernels" data: one NKI Library kernel run on trnlab.

    python benchmarks/nki_library_example.py --library /work/nkilib --out notebooks/data/nki_library_cumsum.json

Runs AWS's `cumsum` kernel (core/cumsum) unmodified through the zero-edit hook at one of its fast
tests' shapes (128 x 2048 float32, the library's default LNC2 on trn2: one program per physical
core), compares it with the library's own PyTorch reference (`cumsum_torch_ref`) at that test's
tolerances, and writes a JSON holding the two traced programs (plain data: instructions, buffers,
kernel line numbers, no kernel source text), the inputs' shape and seed, the simulated latency,
the library's QoR metrics (`trnlab.nki.qor`) and the comparison. A notebook replays the programs on
a 2-core trn2 device (`Program.from_json`, `Device.run_spmd`) to show the timeline without the
library installed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

SHAPE, SEED = (128, 2048), 42          # the library's test_cumsum_fast[128_2048_2_1_float32]
RTOL, ATOL = 1e-3, 1e-3                # that test's tolerances (hidden <= 5000, float32)


def _strip_paths(doc: dict) -> dict:
    """Keep each instruction's kernel file relative to the library (`nkilib/core/cumsum/cumsum.py`)."""
    for ins in doc["instructions"]:
        source = (ins.get("source") or {}).get("tuple")       # (file, line, function), JSON-encoded
        if source and isinstance(source[0], str) and "nkilib/" in source[0]:
            source[0] = source[0][source[0].index("nkilib/"):]
    return doc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.library / "src"))
    sys.dont_write_bytecode = True                         # nothing written into the library
    from trnlab.nki import zero_edit
    zero_edit.install()

    import torch
    from nkilib_src.nkilib.core.cumsum import cumsum
    from nkilib_src.nkilib.core.cumsum.cumsum_torch import cumsum_torch_ref

    import trnlab.nki as tnki
    import trnlab.nki.language as nl
    from trnlab.nki.qor import qor

    np.random.seed(SEED)
    x = np.random.randn(*SHAPE).astype(np.float32)       # as the library's test makes its input
    run = tnki.run(cumsum[nl.nc(2)], x)
    reference = cumsum_torch_ref(torch.from_numpy(x))["output_0"].numpy()
    error = np.abs(run.outputs - reference)
    commit = subprocess.run(["git", "-C", str(args.library), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    doc = {
        "kernel": "nkilib/core/cumsum/cumsum.py: cumsum", "library_commit": commit,
        "test": "test_cumsum_fast[128_2048_2_1_float32]", "target": "trn2", "lnc": 2,
        "input": {"shape": list(SHAPE), "dtype": "float32", "numpy_seed": SEED, "generator": "np.random.randn"},
        "latency_us": run.latency_us, "qor": qor(run),
        "vs_reference": {"reference": "nkilib cumsum_torch_ref (torch.cumsum)", "rtol": RTOL, "atol": ATOL,
                         "max_abs_error": float(error.max()),
                         "passes": bool(np.allclose(run.outputs, reference, rtol=RTOL, atol=ATOL))},
        "programs": [_strip_paths(p.to_json()) for p in run.programs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, separators=(",", ":")))
    print(f"{doc['kernel']}: {run.latency_us:.2f} us simulated, max |error| {error.max():.2e} vs AWS's "
          f"reference ({'pass' if doc['vs_reference']['passes'] else 'FAIL'}); {args.out} "
          f"{args.out.stat().st_size / 1e3:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
