"""Run AWS's tutorial and reference kernels (aws-neuron/nki-samples), unmodified, and compare with the docs.

    python benchmarks/aws_samples.py --samples /work/nki-samples --samples /work/nki-samples-7af4
    python benchmarks/aws_samples.py --samples PATH -k matmul --mode timing --seconds 300

Each case is one row of docs/nki_compat.md's table "AWS's kernels (aws-neuron/nki-samples), imports
changed only". The kernel's own file is imported from the checkout through trnlab's zero-edit hook
(`trnlab.nki.zero_edit`, as ``python -m trnlab.nki run`` does: the file keeps its ``nki`` /
``neuronxcc.nki`` imports) and launched with `nki.run`, each case and mode in its own subprocess under
a CPU-time limit (--seconds), one at a time:

- timing-only at the table's shape (`nki.ShapeDtype` arguments, no values): the simulated latency;
- full mode at the case's full-mode shape (the table's, or a smaller one where values at the table's
  shape cost minutes), compared with a NumPy reference (ours, or the sample's own golden helper).

A case is taken from the first --samples checkout that has its file (6905a68 holds the tutorials as
AWS keeps them now, 7af4e4d the reference kernels and the older tutorials). Modules the samples import
for their own drivers but never call in the kernels (torch_xla, torch_neuronx, loguru) are stubbed
when absent. The table printed: kernel, shape, runs (timing / full), simulated µs, the docs table's
figure and the difference. A benchmark, run on demand; nothing is written into the checkouts.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TUT = "src/nki_samples/tutorials"
REF = "src/nki_samples/reference"


@dataclass
class Case:
    """One row of the docs table: where the kernel lives, how to call it, what the docs say."""
    name: str
    file: str                     # path in the checkout, e.g. src/nki_samples/tutorials/x/y.py
    kernel: str                   # the @nki.jit function's name in that file
    shape: str                    # the table's timing-only shape, as printed
    args: Callable                # (module, full: bool, rng) -> (args, kwargs, grid); full=False: timing shape
    reference: Callable | None    # (module, args, kwargs) -> expected output (full mode), or None
    docs_us: float | None         # the docs table's simulated figure, µs
    target: str | None = None     # preset (None: the kernel's own or trn2)
    rtol: float = 2e-2            # full mode: max |out - ref| / max |ref|
    full_shape: str = ""          # printed when full mode runs at another shape
    extra: dict = field(default_factory=dict)


# -- argument helpers ---------------------------------------------------------------------------------
def _dtype(name: str):
    from trnlab.hardware import dtypes
    return {"bf16": dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32, "int8": np.int8}[name]


def arr(shape, dtype: str, full: bool, rng, low=-1.0, high=1.0):
    """A kernel argument: values in full mode, a ShapeDtype in timing-only mode."""
    import trnlab.nki as tnki
    if not full:
        return tnki.ShapeDtype(tuple(shape), _dtype(dtype))
    if dtype == "int8":
        return rng.integers(-128, 127, size=shape, dtype=np.int8)
    return rng.uniform(low, high, size=shape).astype(np.float32).astype(_dtype(dtype))


def f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


# -- NumPy references ---------------------------------------------------------------------------------
def ref_add(m, a, kw):
    return f32(a[0]) + f32(a[1])


def ref_transpose2d(m, a, kw):
    x, (f1, f2) = a[0], a[1]
    return np.transpose(x.reshape(x.shape[0], f1, f2), (0, 2, 1)).reshape(x.shape)


def ref_avgpool(m, a, kw):
    x, p = f32(a[0]), a[1]
    c, h, w = x.shape
    return x.reshape(c, h // p, p, w // p, p).mean(axis=(2, 4))


def ref_matmul(m, a, kw):
    return f32(a[0]).T @ f32(a[1])


def ref_mamba(m, a, kw):
    delta, u, A, B, C = (f32(x) for x in a)
    batch, channels, seq = delta.shape
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])            # b c n s
    dBu = delta[:, :, None, :] * u[:, :, None, :] * B[:, None, :, :]    # b c n s
    h = np.zeros(dA.shape[:3], np.float32)
    out = np.empty((batch, channels, seq), np.float32)
    for s in range(seq):
        h = dA[..., s] * h + dBu[..., s]
        out[:, :, s] = np.einsum("bcn,bn->bc", h, C[:, :, s])
    return out


def ref_attention_dt(m, a, kw):
    """attention_fwd_performance: q, k, v are [d_head, seqlen]; out [seqlen, d_head]."""
    q, k, v = (f32(x) for x in a)
    s = q.T @ k
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v.T


def ref_softmax(m, a, kw):
    x = f32(a[0])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def ref_rmsnorm(m, a, kw):
    x, g = f32(a[0]), f32(a[1])
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True)) * g


def ref_layernorm(m, a, kw):
    x, eps, g, b = f32(a[0]), a[1], f32(a[2]), f32(a[3])
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def ref_sd_attention(m, a, kw):
    """[seqlen, d_head] q, k, v, softmax scale 0.125 (the tutorial's cpu_golden_attn)."""
    q, k, v = (f32(x) for x in a)
    s = (q * 0.125) @ k.T
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v


# -- the cases ----------------------------------------------------------------------------------------
def _add_args(shape_t, shape_f, nc=False):
    def make(m, full, rng):
        import trnlab.nki.language as nl
        shape = shape_f if full else shape_t
        a, b = arr(shape, "fp16", full, rng, 0, 1), arr(shape, "fp16", full, rng, 0, 1)
        if nc:      # nki_tensor_add_nc2's grid: [spmd_dim(rows / 256, nc(2)), cols / 512]
            return (a, b), {}, (nl.spmd_dim(shape[0] // 256, nl.nc(2)), shape[1] // 512)
        return (a, b), {}, (shape[0] // 128, shape[1] // 512)   # nki_tensor_add's grid
    return make


def _mm_args(timing_kmn, full_kmn):
    def make(m, full, rng):
        k, mm, n = full_kmn if full else timing_kmn
        return (arr((k, mm), "bf16", full, rng), arr((k, n), "bf16", full, rng)), {}, ()
    return make


def _mamba_args(m, full, rng):
    b, c, s, n = (1, 256, 512, 16) if full else (1, 256, 2048, 16)
    delta = arr((b, c, s), "fp32", full, rng, 0.0, 0.1)
    u = arr((b, c, s), "fp32", full, rng)
    A = arr((c, n), "fp32", full, rng, -1.0, -0.1)
    B = arr((b, n, s), "fp32", full, rng)
    C = arr((b, n, s), "fp32", full, rng)
    return (delta, u, A, B, C), {}, ()


def _attn_args(seq_t, seq_f):
    def make(m, full, rng):
        s, dt = (seq_f, "fp32") if full else (seq_t, "bf16")
        return tuple(arr((128, s), dt, full, rng) for _ in range(3)), {}, ()
    return make


def _rows_args(with_gamma=False, layernorm=False, rows_f=512):
    def make(m, full, rng):
        rows, cols = (rows_f, 8192) if full else (4096, 8192)
        x = arr((rows, cols), "fp32", full, rng)
        if layernorm:
            return (x, 1e-5, arr((cols,), "fp32", full, rng), arr((cols,), "fp32", full, rng)), {}, ()
        return ((x, arr((cols,), "fp32", full, rng)) if with_gamma else (x,)), {}, ()
    return make


def _sd_args(m, full, rng):
    s = 1024 if full else 4096
    return tuple(arr((s, 64), "fp32", full, rng, 0, 1) for _ in range(3)), {}, ()


MM = f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py"
ATT = f"{TUT}/attention_fwd_performance/attention_kernels.py"
BIG_MM = ((8192, 4096, 8192), (1024, 2048, 1024))       # (K, M, N): timing, full

CASES: list[Case] = [
    Case("tensor_addition SPMD 2x2", f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
         "nki_tensor_add_kernel_", "[256, 1024] fp16", _add_args((256, 1024), (256, 1024)), ref_add, 20.0),
    Case("tensor_addition nc(2)", f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
         "nki_tensor_add_kernel_", "[512, 2048] fp16", _add_args((512, 2048), (512, 2048), nc=True), ref_add, 25.4),
    Case("transpose2d", f"{TUT}/transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
         "[128, 32 x 512] int8",
         lambda m, full, rng: ((arr((128, 32 * 512), "int8", full, rng), (32, 512)), {}, ()),
         ref_transpose2d, 40.5, rtol=0.0),
    Case("average_pool2d", f"{TUT}/average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
         "[128, 128, 128] fp16, pool 2",
         lambda m, full, rng: ((arr((128, 128, 128), "fp16", full, rng), 2), {}, ()), ref_avgpool, 48.1),
    Case("matmul basic", MM, "nki_matmul_basic_", "[64, 128] @ [128, 512] bf16, Trn1",
         _mm_args((128, 64, 512), (128, 64, 512)), ref_matmul, 24.3, target="trn1"),
    Case("matmul tiled", MM, "nki_matmul_tiled_", "[4096, 8192] @ [8192, 8192] bf16, Trn1", _mm_args(*BIG_MM),
         ref_matmul, 52360.0, target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
    Case("matmul hoist_load", MM, "nki_matmul_hoist_load_", "same", _mm_args(*BIG_MM),
         ref_matmul, 42800.0, target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
    Case("matmul block_free_dimension", MM, "nki_matmul_block_free_dimension_", "same", _mm_args(*BIG_MM),
         ref_matmul, 22160.0, target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
    Case("matmul fully_optimized", MM, "nki_matmul_fully_optimized_", "same", _mm_args(*BIG_MM),
         ref_matmul, 6250.0, target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
] + [
    Case(f"fused_mamba {v}", f"{TUT}/fused_mamba/mamba_nki_kernels.py", f"mamba_{v}",
         "b 1, c 256, s 2048, state 16, fp32", _mamba_args, ref_mamba, us, rtol=1e-3, full_shape="s 512")
    for v, us in (("v1", 867.0), ("v2", 868.0), ("v3", 947.0))
] + [
    Case(f"attention_fwd {v}", ATT, f"attn_fwd_{v}", f"d 128, s {s} bf16", _attn_args(s, 128 if s == 128 else 512),
         ref_attention_dt, us, rtol=1e-2, full_shape="" if s == 128 else "s 512 fp32")
    for v, s, us in (("v1", 128, 19.1), ("v2", 128, 18.9), ("v3", 4096, 3228.0), ("v4", 4096, 860.0),
                     ("v5", 4096, 720.0), ("v6", 4096, 470.0), ("v7", 4096, 309.0), ("v8", 4096, 326.0),
                     ("v9", 4096, 399.0), ("v10", 4096, 345.0))
] + [
    Case("softmax (7af4e4d)", f"{TUT}/softmax/softmax_nki_kernels.py", "nki_softmax_kernel", "[4096, 8192] fp32",
         _rows_args(), ref_softmax, 1352.0, rtol=1e-4, full_shape="[512, 8192]"),
    Case("rmsnorm (7af4e4d)", f"{TUT}/rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel", "[4096, 8192] fp32",
         _rows_args(with_gamma=True), ref_rmsnorm, 1527.0, rtol=1e-4, full_shape="[512, 8192]"),
    Case("layernorm v1 (7af4e4d)", f"{TUT}/layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v1",
         "[4096, 8192] fp32", _rows_args(layernorm=True), ref_layernorm, 2263.0, rtol=1e-4, full_shape="[512, 8192]"),
    Case("layernorm v2 (7af4e4d)", f"{TUT}/layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v2",
         "[4096, 8192] fp32", _rows_args(layernorm=True, rows_f=200), ref_layernorm, 1721.0, rtol=1e-4,
         full_shape="[200, 8192]"),
    Case("sd_attention (7af4e4d)", f"{TUT}/sd_attention/sd_attention_nki_kernels.py",
         "fused_self_attn_for_SD_small_head_size", "s 4096, d 64 fp32", _sd_args, ref_sd_attention, 614.0,
         rtol=1e-3, full_shape="s 1024"),
]


# -- the child: one case, one mode --------------------------------------------------------------------
STUBS = ("torch_xla", "torch_xla.core", "torch_xla.core.xla_model", "torch_neuronx", "loguru")


def _stub_attribute(attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return types.SimpleNamespace()            # e.g. loguru.logger


def _stub_absent(names) -> None:
    """Empty modules for the samples' own-driver imports that are not installed (never used by a kernel)."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__getattr__ = _stub_attribute
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)


def load_kernel_module(checkout: Path, rel: str):
    """Import the sample's file from the checkout as its own scripts do (its folder on sys.path)."""
    path = checkout / rel
    sys.path.insert(0, str(path.parent))
    if "/reference/" in rel:
        sys.path.insert(0, str(checkout / "src"))
        return importlib.import_module("nki_samples.reference." + path.stem)
    return importlib.import_module(path.stem)


def child(case: Case, checkout: Path, mode: str) -> dict:
    from trnlab.nki import zero_edit
    zero_edit.install()
    _stub_absent(STUBS)
    import trnlab.nki as tnki
    module = load_kernel_module(checkout, case.file)
    kernel = getattr(module, case.kernel)
    full = mode == "full"
    rng = np.random.default_rng(0)
    args, kwargs, grid = case.args(module, full, rng)
    options = {"timing_only": not full}
    if case.target:
        options["target"] = case.target
    if grid:
        options["grid"] = grid
    start = time.process_time()
    run = tnki.run(kernel, *args, **options, **kwargs)
    result = {"us": run.latency_us, "cpu_s": round(time.process_time() - start, 2)}
    if full and case.reference is not None:
        out = run.outputs[0] if isinstance(run.outputs, (tuple, list)) else run.outputs
        expected = case.reference(module, args, kwargs)
        out = f32(out).reshape(expected.shape)
        scale = float(np.max(np.abs(expected))) or 1.0
        result["rel_error"] = float(np.max(np.abs(out - expected))) / scale
        result["ok"] = bool(result["rel_error"] <= case.rtol) if case.rtol else bool(np.array_equal(out, expected))
    return result


# -- the parent ---------------------------------------------------------------------------------------
def run_case(case: Case, checkout: Path, mode: str, seconds: int) -> dict:
    """The case in its own process under a CPU-time limit; its result or its error's last line."""
    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--mode", mode,
           "--samples", str(checkout)]
    wall = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=limit, cwd=str(REPO))
    wall = round(time.time() - wall, 1)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return {**json.loads(line[7:]), "wall_s": wall}
    if proc.returncode in (-9, -24):         # SIGKILL / SIGXCPU: the CPU-time limit
        return {"error": f"CPU-time limit ({seconds} s)", "wall_s": wall}
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    error = next((ln for ln in reversed(lines) if not ln.startswith(" ")), "no output")
    return {"error": error[:300], "wall_s": wall}


def _checkout_for(case: Case, checkouts: list[Path]) -> Path | None:
    return next((c for c in checkouts if (c / case.file).is_file()), None)


def _fmt_us(us: float | None) -> str:
    if us is None:
        return ""
    return f"{us / 1e3:.2f} ms" if us >= 10_000 else f"{us:.1f} µs"


def _commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", action="append", required=True, type=Path,
                        help="a checkout of aws-neuron/nki-samples (repeatable; the first with a case's file wins)")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--mode", choices=("timing", "full", "both"), default="both")
    parser.add_argument("--seconds", type=int, default=120, help="CPU-time limit per case and mode")
    parser.add_argument("--json", type=Path, help="also write the results here, one JSON object a line")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        case = next(c for c in CASES if c.name == options.child)
        print("RESULT " + json.dumps(child(case, options.samples[0], options.mode)), flush=True)
        return 0
    modes = ("timing", "full") if options.mode == "both" else (options.mode,)
    print("checkouts: " + ", ".join(f"{c} ({_commit(c)})" for c in options.samples))
    header = f"{'kernel':32} {'shape':40} {'runs (timing / full)':22} {'simulated':>11} {'docs':>11} {'diff':>8}"
    print(header)
    rows, failures = [], 0
    for case in CASES:
        if options.k and options.k not in case.name:
            continue
        checkout = _checkout_for(case, options.samples)
        if checkout is None:
            print(f"{case.name:32} {case.shape:40} not in these checkouts")
            continue
        results = {m: run_case(case, checkout, m, options.seconds) for m in modes}
        timing = results.get("timing", {})
        full = results.get("full", {})
        runs = " / ".join(("yes" if "us" in r else "no") if m == "timing" else
                          ("yes" if r.get("ok") else ("no" if "error" in r else "WRONG"))
                          for m, r in results.items())
        us = timing.get("us")
        diff = f"{(us - case.docs_us) / case.docs_us:+.1%}" if us is not None and case.docs_us else ""
        print(f"{case.name:32} {case.shape:40} {runs:22} {_fmt_us(us):>11} {_fmt_us(case.docs_us):>11} {diff:>8}",
              flush=True)
        for m, r in results.items():
            if "error" in r:
                failures += 1
                print(f"    {m}: {r['error']}")
            elif m == "full" and not r.get("ok"):
                failures += 1
                print(f"    full ({case.full_shape or case.shape}): rel. error {r.get('rel_error'):.2e} > {case.rtol}")
        rows.append({"case": case.name, "checkout": _commit(checkout), "docs_us": case.docs_us, **{
            m: r for m, r in results.items()}})
        if options.json:
            with open(options.json, "a") as out:
                out.write(json.dumps(rows[-1]) + "\n")
    print(f"{len(rows)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
