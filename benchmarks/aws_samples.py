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
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
import types
from dataclasses import dataclass
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
    docs: str                     # the docs table's simulated figure as written there: "20.0 µs", "52.36 ms"
    target: str | None = None     # preset (None: the kernel's own or trn2)
    rtol: float = 2e-2            # full mode: max |out - ref| / max |ref|
    full_shape: str = ""          # printed when full mode runs at another shape
    full: bool = True             # False: timing-only (full mode not tried: minutes per case)
    expect_error: str = ""        # full mode: an error the kernel is known to raise (the docs' "(yes)")


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


CHECKOUT: Path | None = None      # the child's checkout (the reference kernels' unit tests live there)


def sample_test(name: str):
    """A unit-test module of the checkout (test/unit/NAME.py), for its own golden helpers."""
    path = CHECKOUT / "test" / "unit" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_aws_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ref_rotary(m, a, kw):
    """q, k [b, h, s, d], cos / sin [b, s, d]: x * cos + rotate_half(x) * sin, stacked [2, b, h, s, d]."""
    q, k, cos, sin = (f32(x) for x in a)
    def rope(x):
        half = x.shape[-1] // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos[:, None] + rotated * sin[:, None]
    return np.stack([rope(q), rope(k)])


def _rotary_args(m, full, rng):
    b, h, s, d = 2, 32, (200 if full else 256), 128
    q, k = arr((b, h, s, d), "fp32", full, rng), arr((b, h, s, d), "fp32", full, rng)
    cos, sin = arr((b, s, d), "fp32", full, rng), arr((b, s, d), "fp32", full, rng)
    return (q, k, cos, sin), {}, (b, h)


def _sd_ref_args(m, full, rng):
    q, k, v = (arr(sh, "bf16", full, rng, 0, 1) for sh in ((1, 128, 4096), (1, 4096, 128), (1, 4096, 128)))
    return (q, k, v), {}, (1,)


def ref_sd_ref(m, a, kw):
    return sample_test("test_SD_attention_small_head").cpu_golden_attn(*(f32(x) for x in a))


def _alloc_sd_args(m, full, rng):
    q, k, v = (arr(sh, "bf16", full, rng, 0, 1) for sh in ((1, 128, 4096), (1, 128, 4096), (1, 4096, 128)))
    return (q, k, v), {}, (1,)


def ref_alloc_sd(m, a, kw):
    return sample_test("test_allocated_SD_attention_small_head").cpu_golden_attn(*(f32(x) for x in a))


def _rmsnorm_qkv_args(m, full, rng):
    return (arr((1, 512, 1024), "bf16", full, rng, 0, 1), arr((1024, 384), "bf16", full, rng, 0, 1)), {}, ()


def ref_rmsnorm_qkv(m, a, kw):
    return sample_test("test_rmsnorm_qkv").cpu_golden_result(f32(a[0]), None, f32(a[1]), np.float32)


def _flash_fwd_args(m, full, rng):
    s, d, dt = (4096, 128, "fp32") if full else (16384, 96, "bf16")
    q, k = arr((1, 1, d, s), dt, full, rng), arr((1, 1, d, s), dt, full, rng)
    v = arr((1, 1, s, d), dt, full, rng)
    config = m.FlashConfig(seq_tile_size=2048, training=False, should_transpose_v=False)
    return (q, k, v, None), {"use_causal_mask": True, "mixed_precision": True, "config": config}, (1, 1)


def ref_flash_fwd(m, a, kw):
    q, k, v = (f32(x) for x in a[:3])       # as AWS's numerical test: v given [b, h, s, d], golden (b, h, d, s)
    golden = sample_test("test_flash_attn_fwd").cpu_attention_forward(
        q, k, v.transpose(0, 1, 3, 2), use_causal_mask=True, mixed_precision=True)[0]
    return golden.transpose(0, 1, 3, 2)


def _flash_bwd_args(m, full, rng):
    b, h, s, d = 1, 4, 4096, 128
    q, k, v, o, dy = (arr((b, h, d, s), "fp32", full, rng) for _ in range(5))
    lse = arr((b, h, 128, s // 128), "fp32", full, rng, 0, 1)
    return (q, k, v, o, dy, lse, None), {"use_causal_mask": True, "mixed_precision": True}, (b, h)


def _add_kernel_args(m, full, rng):
    shape = (2, 8, 128, 512)
    return (arr(shape, "fp32", full, rng), arr(shape, "fp32", full, rng), int(np.prod(shape)) - 700), {}, (2,)


def _resize_args(m, full, rng):
    b = 1 if full else 10
    return (arr((b, 30, 20, 1280), "fp32", full, rng, 0, 1), (b, 59, 38, 1280)), {}, (b,)


def ref_resize(m, a, kw):
    return sample_test("test_resize_nearest").cpu_golden_result(f32(a[0]), a[1])


def _adaptive_args(m, full, rng):
    c = 256 if full else 2048
    return (arr((2, c, 32, 32), "fp32", full, rng), (3, 3)), {}, ()


def ref_adaptive(m, a, kw):
    return sample_test("test_adaptive_avg_pool2d").cpu_golden_result_numpy(f32(a[0]), a[1])


def _select_scatter_args(m, full, rng):
    return (arr((8, 64, 112, 112), "fp32", full, rng), arr((8, 64, 56, 56), "fp32", full, rng)), {}, ()


def _double_row_args(m, full, rng):
    """AWS's unit test's inputs: rhs quantized column-wise to FP8 and laid out by the test's reshape()."""
    import trnlab.nki as tnki
    import trnlab.nki.language as nl
    helpers = sample_test("test_double_row_matmul")
    M, K, N, tiles = (256, 1024, 512, (2, 1, 8)) if full else (512, 16 * 1024, 1024, (2, 2, 16))
    rhs = rng.random((K, N))
    scale, quantized = helpers.column_wise_quantize(rhs)
    quantized = helpers.reshape(quantized)
    if not full:
        return (tnki.ShapeDtype((M, K), _dtype("bf16")), tnki.ShapeDtype(quantized.shape, nl.float8_e4m3),
                tnki.ShapeDtype(np.shape(scale), _dtype("bf16"))) + tiles, {}, ()
    lhs = rng.random((M, K))
    args = (nl.static_cast(lhs, nl.bfloat16), nl.static_cast(quantized, nl.float8_e4m3),
            nl.static_cast(scale, nl.bfloat16)) + tiles
    return args, {"_golden": lhs @ rhs}, ()


def _mx(full: bool, arrays: tuple) -> tuple:
    """MX inputs are small: built in both modes (AWS's own generator), ShapeDtypes in timing-only."""
    import trnlab.nki as tnki
    return tuple(a if full or not isinstance(a, np.ndarray) else tnki.ShapeDtype(a.shape, a.dtype)
                 for a in arrays)


def _mx_helpers():
    import ml_dtypes
    import trnlab.nki.language as nl
    cpu = importlib.import_module("mx_cpu_utils")        # the tutorial's own golden helpers (its folder)
    dtypes = {"e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn}
    x4 = {"e5m2": nl.float8_e5m2_x4, "e2m1": nl.float4_e2m1fn_x4}
    return cpu, dtypes, x4


def _mx_offline_args(qd):
    def make(m, full, rng):
        cpu, dtypes, x4 = _mx_helpers()
        np.random.seed(0)
        K, M, N = 128, 128, 512
        _, _, st, st_scale = cpu.generate_stabilized_mx_data(dtypes[qd], (K, M * 4))
        _, _, mv, mv_scale = cpu.generate_stabilized_mx_data(dtypes[qd], (K, N * 4))
        golden = cpu.nc_matmul_mx_golden(st, mv, st_scale, mv_scale, dtypes[qd], dtypes[qd]) if full else None
        return _mx(full, (st, st_scale, mv, mv_scale)) + (x4[qd],), {"_golden": golden}, ()
    return make


def _mx_on_device_args(qd_st, qd_mv):
    def make(m, full, rng):
        cpu, dtypes, x4 = _mx_helpers()
        np.random.seed(0)
        K, M, N = 128, 128, 512
        _, _, st, st_scale = cpu.generate_stabilized_mx_data(dtypes[qd_st], (K, M * 4))
        mv_data = cpu.generate_stabilized_mx_data(dtypes[qd_mv], (K, N * 4))[0]
        golden = None
        if full:
            mv_q, mv_scale = cpu.quantize_mx_golden(mv_data, dtypes[qd_mv])
            golden = cpu.nc_matmul_mx_golden(st, mv_q, st_scale, mv_scale, dtypes[qd_st], dtypes[qd_mv])
        mv_bf16 = mv_data.astype(np.float32).astype(_dtype("bf16"))
        return _mx(full, (st, st_scale, mv_bf16)) + (x4[qd_st], x4[qd_mv]), {"_golden": golden}, ()
    return make


def _mx_copy_strided_args(use_tensor_copy: bool):
    def make(m, full, rng):
        cpu, dtypes, x4 = _mx_helpers()
        np.random.seed(0)
        K, M, N = 512, 128, 512
        st = cpu.generate_stabilized_mx_data(dtypes["e5m2"], (K, M))[0]
        mv = cpu.generate_stabilized_mx_data(dtypes["e5m2"], (K, N))[0]
        golden = st.astype(np.float32).T @ mv.astype(np.float32)
        arrays = (st.astype(np.float32).astype(_dtype("bf16")), mv.astype(np.float32).astype(_dtype("bf16")))
        return _mx(full, arrays) + (x4["e5m2"], use_tensor_copy), {"_golden": golden}, ()
    return make


def ref_golden(m, a, kw):
    return np.asarray(kw["_golden"], np.float32)


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
    b, c, s, n = 1, 256, 2048, 16
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


def _rows_args(with_gamma=False, layernorm=False, rows_f=4096):
    def make(m, full, rng):
        rows, cols = (rows_f, 8192) if full else (4096, 8192)
        x = arr((rows, cols), "fp32", full, rng)
        if layernorm:
            return (x, 1e-5, arr((cols,), "fp32", full, rng), arr((cols,), "fp32", full, rng)), {}, ()
        return ((x, arr((cols,), "fp32", full, rng)) if with_gamma else (x,)), {}, ()
    return make


def _sd_args(m, full, rng):
    s = 4096
    return tuple(arr((s, 64), "fp32", full, rng, 0, 1) for _ in range(3)), {}, ()


MM = f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py"
ATT = f"{TUT}/attention_fwd_performance/attention_kernels.py"
BIG_MM = ((8192, 4096, 8192), (1024, 2048, 1024))       # (K, M, N): timing, full

CASES: list[Case] = [
    Case("tensor_addition SPMD 2x2", f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
         "nki_tensor_add_kernel_", "[256, 1024] fp16", _add_args((256, 1024), (256, 1024)), ref_add, "20.0 µs"),
    Case("tensor_addition nc(2)", f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
         "nki_tensor_add_kernel_", "[512, 2048] fp16", _add_args((512, 2048), (512, 2048), nc=True), ref_add,
         "25.4 µs"),
    Case("transpose2d", f"{TUT}/transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
         "[128, 32 x 512] int8",
         lambda m, full, rng: ((arr((128, 32 * 512), "int8", full, rng), (32, 512)), {}, ()),
         ref_transpose2d, "40.5 µs", rtol=0.0),
    Case("average_pool2d", f"{TUT}/average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
         "[128, 128, 128] fp16, pool 2",
         lambda m, full, rng: ((arr((128, 128, 128), "fp16", full, rng), 2), {}, ()), ref_avgpool, "48.1 µs"),
    Case("matmul basic", MM, "nki_matmul_basic_", "[64, 128] @ [128, 512] bf16, Trn1",
         _mm_args((128, 64, 512), (128, 64, 512)), ref_matmul, "24.3 µs", target="trn1"),
    Case("matmul tiled", MM, "nki_matmul_tiled_", "[4096, 8192] @ [8192, 8192] bf16, Trn1", _mm_args(*BIG_MM),
         ref_matmul, "52.36 ms", target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
    Case("matmul hoist_load", MM, "nki_matmul_hoist_load_", "same", _mm_args(*BIG_MM),
         ref_matmul, "42.80 ms", target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
    Case("matmul block_free_dimension", MM, "nki_matmul_block_free_dimension_", "same", _mm_args(*BIG_MM),
         ref_matmul, "22.16 ms", target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
    Case("matmul fully_optimized", MM, "nki_matmul_fully_optimized_", "same", _mm_args(*BIG_MM),
         ref_matmul, "6.25 ms", target="trn1", full_shape="[2048, 1024] @ [1024, 1024]"),
] + [
    Case(f"fused_mamba {v}", f"{TUT}/fused_mamba/mamba_nki_kernels.py", f"mamba_{v}",
         "b 1, c 256, s 2048, state 16, fp32", _mamba_args, ref_mamba, us, rtol=1e-3)
    for v, us in (("v1", "867 µs"), ("v2", "868 µs"), ("v3", "947 µs"))
] + [
    Case(f"attention_fwd {v}", ATT, f"attn_fwd_{v}", f"d 128, s {s} bf16", _attn_args(s, s),
         ref_attention_dt, us, rtol=1e-2, full_shape="" if s == 128 else "s 4096 fp32")
    for v, s, us in (("v1", 128, "19.1 µs"), ("v2", 128, "18.9 µs"), ("v3", 4096, "3228 µs"),
                     ("v4", 4096, "860 µs"),
                     ("v5", 4096, "720 µs"), ("v6", 4096, "470 µs"), ("v7", 4096, "309 µs"), ("v8", 4096, "326 µs"),
                     ("v9", 4096, "399 µs"), ("v10", 4096, "345 µs"))
] + [
    Case("softmax (7af4e4d)", f"{TUT}/softmax/softmax_nki_kernels.py", "nki_softmax_kernel", "[4096, 8192] fp32",
         _rows_args(), ref_softmax, "1352 µs", rtol=1e-4),
    Case("rmsnorm (7af4e4d)", f"{TUT}/rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel", "[4096, 8192] fp32",
         _rows_args(with_gamma=True), ref_rmsnorm, "1527 µs", rtol=1e-4),
    Case("layernorm v1 (7af4e4d)", f"{TUT}/layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v1",
         "[4096, 8192] fp32", _rows_args(layernorm=True), ref_layernorm, "2263 µs", rtol=1e-4),
    Case("layernorm v2 (7af4e4d)", f"{TUT}/layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v2",
         "[4096, 8192] fp32", _rows_args(layernorm=True, rows_f=200), ref_layernorm, "1721 µs", rtol=1e-4,
         full_shape="[200, 8192] (rows not a multiple of 128)"),
    Case("sd_attention (7af4e4d)", f"{TUT}/sd_attention/sd_attention_nki_kernels.py",
         "fused_self_attn_for_SD_small_head_size", "s 4096, d 64 fp32", _sd_args, ref_sd_attention, "614 µs",
         rtol=1e-3),
    Case("rotary (7af4e4d)", f"{TUT}/rotary/rotary_nki_kernels.py", "nki_apply_rotary_embedding",
         "b 2, h 32, s 256, d 128 fp32, grid (2, 32)", _rotary_args, ref_rotary, "407 µs", rtol=1e-5,
         full_shape="s 200 (a masked last tile)"),
    Case("ref tutorial.add_kernel_nx8x128x512", f"{REF}/tutorial.py", "add_kernel_nx8x128x512",
         "[2, 8, 128, 512] fp32, n = all - 700, grid (2,)", _add_kernel_args, None, "48.7 µs",
         expect_error="UninitializedReadError"),
    Case("ref fused_self_attn_for_SD_small_head_size", f"{REF}/attention.py",
         "fused_self_attn_for_SD_small_head_size", "bs 1, s 4096, d 128 bf16", _sd_ref_args, ref_sd_ref, "613 µs"),
    Case("ref allocated_fused_self_attn_for_SD", f"{REF}/allocated_attention.py",
         "allocated_fused_self_attn_for_SD_small_head_size", "same", _alloc_sd_args, ref_alloc_sd, "291 µs"),
    Case("ref flash_fwd (causal)", f"{REF}/attention.py", "flash_fwd", "b 1, h 1, s 16 K, d 96 bf16",
         _flash_fwd_args, ref_flash_fwd, "3.42 ms", full_shape="s 4096, d 128 fp32"),
    Case("ref flash_attn_bwd (causal)", f"{REF}/attention.py", "flash_attn_bwd", "b 1, h 4, s 4096, d 128 fp32",
         _flash_bwd_args, None, "3.04 ms", full=False),
    Case("ref allocated_fused_rms_norm_qkv", f"{REF}/allocated_fused_linear.py", "allocated_fused_rms_norm_qkv",
         "b 1, s 512, dim 1024, d_head 384 bf16", _rmsnorm_qkv_args, ref_rmsnorm_qkv, "35.0 µs"),
    Case("ref resize_nearest_fixed_dma_kernel", f"{REF}/vision.py", "resize_nearest_fixed_dma_kernel",
         "[10, 30, 20, 1280] -> [10, 59, 38, 1280] fp32, grid (10,)", _resize_args, ref_resize, "6,441 µs",
         rtol=0.0, full_shape="[1, 30, 20, 1280]"),
    Case("ref adaptive_avg_pool2d_kernel", f"{REF}/vision.py", "adaptive_avg_pool2d_kernel",
         "[2, 2048, 32, 32] -> (3, 3) fp32", _adaptive_args, ref_adaptive, "508 µs", rtol=1e-5,
         full_shape="[2, 256, 32, 32]"),
    Case("ref select_and_scatter_kernel", f"{REF}/vision.py", "select_and_scatter_kernel",
         "[8, 64, 112, 112] fp32", _select_scatter_args, None, "3112 µs", full=False),
    Case("ref quantized_double_row_matmul", f"{REF}/double_row_matmul.py", "quantized_double_row_matmul",
         "M 512, K 16 K, N 1024, fp8 rhs", _double_row_args, ref_golden, "369 µs",
         full_shape="M 256, K 1024, N 512"),
    Case("mxfp-matmul offline MXFP8 (e5m2), Trn3", f"{TUT}/mxfp-matmul/mx_kernels.py",
         "kernel_offline_quantized_mx_matmul", "K 128, M 128, N 512 (x4)", _mx_offline_args("e5m2"), ref_golden,
         "21.0 µs"),
    Case("mxfp-matmul on-device quantize e5m2", f"{TUT}/mxfp-matmul/mx_kernels.py",
         "kernel_on_device_quantize_matmul_mx", "same", _mx_on_device_args("e5m2", "e5m2"), ref_golden, "19.1 µs"),
    Case("mxfp-matmul copy-strided tensor_copy", f"{TUT}/mxfp-matmul/mx_kernels.py",
         "kernel_copy_strided_quantize_matmul_mx", "K 512, M 128, N 512 bf16", _mx_copy_strided_args(True),
         ref_golden, "19.4 µs"),
    Case("mxfp-matmul copy-strided DMA", f"{TUT}/mxfp-matmul/mx_kernels.py",
         "kernel_copy_strided_quantize_matmul_mx", "same", _mx_copy_strided_args(False), ref_golden, "56.7 µs"),
    Case("mxfp-matmul offline MXFP4 (e2m1)", f"{TUT}/mxfp-matmul/mx_kernels.py",
         "kernel_offline_quantized_mx_matmul", "K 128, M 128, N 512 (x4)", _mx_offline_args("e2m1"), ref_golden,
         "21.0 µs"),
    Case("mxfp-matmul on-device MXFP4 x MXFP8", f"{TUT}/mxfp-matmul/mx_kernels.py",
         "kernel_on_device_quantize_matmul_mx", "same", _mx_on_device_args("e2m1", "e5m2"), ref_golden, "19.1 µs"),
]


# The table's prose: "In program order the rows that differ took: ..." (trnlab.nki.SCHEDULE = "program").
# Rows not named there equal their table figure in program order (tiled and hoist_load are over the
# list schedule's limit, attention v9 / v10 keep program order by their own directive).
PROGRAM_ORDER = {
    "tensor_addition SPMD 2x2": "21.4 µs", "tensor_addition nc(2)": "27.8 µs",
    "matmul block_free_dimension": "22.38 ms", "matmul fully_optimized": "6.73 ms",
    "fused_mamba v1": "993 µs", "fused_mamba v2": "999 µs", "fused_mamba v3": "1212 µs",
    "attention_fwd v3": "3669 µs", "attention_fwd v4": "962 µs", "attention_fwd v5": "823 µs",
    "attention_fwd v6": "669 µs", "attention_fwd v7": "435 µs", "attention_fwd v8": "452 µs",
    "softmax (7af4e4d)": "1359 µs", "rmsnorm (7af4e4d)": "1614 µs", "layernorm v1 (7af4e4d)": "2270 µs",
    "layernorm v2 (7af4e4d)": "1728 µs", "sd_attention (7af4e4d)": "1029 µs", "rotary (7af4e4d)": "492 µs",
    "ref tutorial.add_kernel_nx8x128x512": "52.4 µs", "ref fused_self_attn_for_SD_small_head_size": "1053 µs",
    "ref allocated_fused_self_attn_for_SD": "506 µs", "ref flash_fwd (causal)": "7.17 ms",
    "ref flash_attn_bwd (causal)": "6.95 ms", "ref allocated_fused_rms_norm_qkv": "39.2 µs",
    "ref resize_nearest_fixed_dma_kernel": "8,600 µs", "ref adaptive_avg_pool2d_kernel": "571 µs",
    "ref select_and_scatter_kernel": "3071 µs", "ref quantized_double_row_matmul": "546 µs",
    "mxfp-matmul on-device quantize e5m2": "20.3 µs", "mxfp-matmul on-device MXFP4 x MXFP8": "20.3 µs",
}


# -- the child: one case, one mode --------------------------------------------------------------------
STUBS = ("torch_xla", "torch_xla.core", "torch_xla.core.xla_model", "torch_neuronx", "loguru",
         "transformers", "transformers.models", "transformers.models.llama",
         "transformers.models.llama.modeling_llama")


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


def child(case: Case, checkout: Path, mode: str, schedule: str = "default") -> dict:
    global CHECKOUT
    CHECKOUT = checkout
    from trnlab.nki import zero_edit
    zero_edit.install()
    _stub_absent(STUBS)
    import trnlab.nki as tnki
    if schedule == "program":
        tnki.SCHEDULE = "program"
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
    call_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    start = time.process_time()
    try:
        run = tnki.run(kernel, *args, **options, **call_kwargs)
        outputs = run.outputs
        if full and case.reference is None:
            np.asarray(outputs[0] if isinstance(outputs, (tuple, list)) else outputs).sum()   # read it
    except Exception as error:
        if full and case.expect_error and case.expect_error in type(error).__name__:
            return {"expected_error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
        raise
    result = {"us": run.latency_us, "cpu_s": round(time.process_time() - start, 2)}
    if full and case.reference is not None:
        out = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        expected = case.reference(module, args, kwargs)
        out = f32(out).reshape(expected.shape)
        scale = float(np.max(np.abs(expected))) or 1.0
        result["rel_error"] = float(np.max(np.abs(out - expected))) / scale
        result["ok"] = bool(result["rel_error"] <= case.rtol) if case.rtol else bool(np.array_equal(out, expected))
    return result


# -- the parent ---------------------------------------------------------------------------------------
def run_case(case: Case, checkout: Path, mode: str, seconds: int, schedule: str = "default") -> dict:
    """The case in its own process under a CPU-time limit; its result or its error's last line."""
    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--mode", mode,
           "--samples", str(checkout), "--schedule", schedule]
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


def docs_figure(text: str) -> tuple[float, str, int]:
    """ "52.36 ms" -> (52360.0, "ms", 2): the docs' figure in µs, its unit and its decimals."""
    number, unit = text.replace(",", "").split()
    decimals = len(number.split(".")[1]) if "." in number else 0
    return float(number) * (1e3 if unit == "ms" else 1.0), unit, decimals


def compare(us: float, docs: str) -> tuple[str, str]:
    """The simulated figure written as the docs write theirs, and the difference: "=" when it is
    within one unit of the docs' last digit (the table rounds most figures and truncates some:
    resize_nearest's 6,441.5 µs is "6,441 µs"), else the change in percent."""
    docs_us, unit, decimals = docs_figure(docs)
    scale = 1e3 if unit == "ms" else 1.0
    shown = f"{us / scale:,.{decimals}f} {unit}" if "," in docs else f"{us / scale:.{decimals}f} {unit}"
    if abs(us - docs_us) / scale < 10.0 ** -decimals:
        return shown, "="
    return shown, f"{(us - docs_us) / docs_us:+.1%}"


def _commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "not a git checkout"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", action="append", required=True, type=Path,
                        help="a checkout of aws-neuron/nki-samples (repeatable; the first with a case's file wins)")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--mode", choices=("timing", "full", "both"), default="both")
    parser.add_argument("--seconds", type=int, default=120, help="CPU-time limit per case and mode")
    parser.add_argument("--schedule", choices=("default", "program"), default="default",
                        help="program: every kernel in program order, against the table's program-order figures")
    parser.add_argument("--json", type=Path, help="also write the results here, one JSON object a line")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        case = next(c for c in CASES if c.name == options.child)
        print("RESULT " + json.dumps(child(case, options.samples[0], options.mode, options.schedule)), flush=True)
        return 0
    modes = ("timing", "full") if options.mode == "both" else (options.mode,)
    print("checkouts: " + ", ".join(f"{c} ({_commit(c)})" for c in options.samples))
    header = (f"{'kernel':40} {'shape':44} {'runs (timing / full)':21} {'full rel. err':>13} {'simulated':>11} "
              f"{'docs':>11} {'diff':>7}")
    print(header)
    rows, failures, differ = [], 0, 0
    for case in CASES:
        if options.k and options.k not in case.name:
            continue
        checkout = _checkout_for(case, options.samples)
        if checkout is None:
            print(f"{case.name:40} {case.shape:44} not in these checkouts")
            continue
        results = {m: run_case(case, checkout, m, options.seconds, options.schedule)
                   for m in modes if m == "timing" or case.full}
        timing = results.get("timing", {})
        full = results.get("full", {})
        runs = " / ".join([("yes" if "us" in r else "no") if m == "timing" else
                          ("yes" if r.get("ok") else "(yes)" if "expected_error" in r else
                           "no" if "error" in r else "WRONG")
                          for m, r in results.items()] + (["-"] if not case.full and "full" in modes else []))
        us = timing.get("us")
        docs = PROGRAM_ORDER.get(case.name, case.docs) if options.schedule == "program" else case.docs
        shown, diff = compare(us, docs) if us is not None else ("", "")
        differ += diff not in ("", "=")
        error = f"{full['rel_error']:.1e}" if "rel_error" in full else ""
        print(f"{case.name:40} {case.shape:44} {runs:21} {error:>13} {shown:>11} {docs:>11} {diff:>7}",
              flush=True)
        for m, r in results.items():
            if "error" in r:
                failures += 1
                print(f"    {m}: {r['error']}")
            elif m == "full" and "expected_error" in r:
                print(f"    full: {r['expected_error']} (known, the docs' \"(yes)\")")
            elif m == "full" and not r.get("ok"):
                failures += 1
                print(f"    full ({case.full_shape or case.shape}): rel. error {r.get('rel_error'):.2e} "
                      f"> {case.rtol}")
        rows.append({"case": case.name, "checkout": _commit(checkout), "docs": docs, "schedule": options.schedule,
                     **results})
        if options.json:
            with open(options.json, "a") as out:
                out.write(json.dumps(rows[-1]) + "\n")
    print(f"{len(rows)} cases, {failures} failures, {differ} figures differ from the docs")
    return 1 if failures or differ else 0


if __name__ == "__main__":
    sys.exit(main())
