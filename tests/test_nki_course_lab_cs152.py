"""A course lab written for a trn1 instance runs here unmodified: Berkeley CS152's Lab 6 in shape (a
directed part whose kernels call kernels — a transpose, a bias-and-activation chosen by a string
argument, a forward pass that picks a matmul kernel by name, a prediction by `max8` / `nc_find_index8`
into a 1-D result — checked once through ``nki.simulate_kernel`` and once called directly, and an
open-ended part timed by ``nki.benchmark(warmup=, iters=)`` against a latency threshold), run by
``python -m trnlab.nki run`` on the Trn1 preset the lab's instance has. The lab here is our own, small;
docs/nki_compat.md records the run of the lab itself (github ucb-152/lab6)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware.errors import MemoryPlacementError

ROOT = Path(__file__).resolve().parents[1]

KERNELS = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def transpose(x):
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.hbm)
    for c in nl.affine_range(cols // 128):
        for r in nl.affine_range(rows // 128):
            nl.store(out[c * 128:(c + 1) * 128, r * 128:(r + 1) * 128],
                     value=nl.load_transpose2d(x[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128]))
    return out


@nki.jit
def bias_act(a, b, act="relu"):
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.hbm)
    bias = nl.load(b).broadcast_to((128, cols))                      # [1, F] spread over 128 partitions
    for r in nl.affine_range(rows // 128):
        x = nl.add(nl.load(a[r * 128:(r + 1) * 128, :]), bias)
        if act == "relu":
            y = nl.relu(x)
        else:
            e = nl.exp(nl.subtract(x, nl.max(x, axis=1, keepdims=True)))
            y = nl.divide(e, nl.sum(e, axis=1, keepdims=True))
        nl.store(out[r * 128:(r + 1) * 128, :], value=y)
    return out


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 256):
            acc = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lhs_tile = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rhs_tile = nl.load(rhs[k * 128:(k + 1) * 128, n * 256:(n + 1) * 256])
                acc += nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
            nl.store(out[m * 128:(m + 1) * 128, n * 256:(n + 1) * 256], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def forward(x, w1, b1, w2, b2, matmul_kernel="tiled"):
    if matmul_kernel != "tiled":
        raise ValueError(f"Unsupported matmul kernel: {matmul_kernel}")
    hidden = bias_act(matmul_tiled(transpose(x), w1), b1, act="relu")
    return bias_act(matmul_tiled(transpose(hidden), w2), b2, act="softmax")


@nki.jit
def predict(x, w1, b1, w2, b2):
    probs = forward(x, w1, b1, w2, b2)
    rows, _ = probs.shape
    predictions = nl.ndarray((rows,), dtype=np.int32, buffer=nl.hbm)
    column = predictions.reshape((rows, 1))
    for r in nl.affine_range(rows // 128):
        p = nl.load(probs[r * 128:(r + 1) * 128, :])
        index = nisa.nc_find_index8(data=p, vals=nisa.max8(src=p))   # [128, 8], the largest first
        nl.store(column[r * 128:(r + 1) * 128, :], value=nl.copy(index[:, 0:1], dtype=np.int32))
    return predictions
'''

TESTER = '''
import argparse
import numpy as np
import neuronxcc.nki as nki
from kernels import bias_act, forward, predict, transpose

def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)

parser = argparse.ArgumentParser()
parser.add_argument("--simulate", action="store_true")
parser.add_argument("--benchmark", action="store_true")
args = parser.parse_args()
np.random.seed(152)
x = np.random.rand(256, 256).astype(np.float32)
w1 = (np.random.randn(256, 512) * 0.05).astype(np.float32)
b1 = (np.random.randn(1, 512) * 0.05).astype(np.float32)
w2 = (np.random.randn(512, 256) * 0.05).astype(np.float32)
b2 = (np.random.randn(1, 256) * 0.05).astype(np.float32)
run = (lambda kernel, *a, **k: nki.simulate_kernel(kernel, *a, **k)) if args.simulate else \\
      (lambda kernel, *a, **k: kernel(*a, **k))
assert np.allclose(run(transpose, x), x.T), "transpose"
assert np.allclose(run(bias_act, x, b2, act="relu"), np.maximum(x + b2, 0), atol=1e-6), "relu"
assert np.allclose(run(bias_act, x, b2, act="softmax"), softmax(x + b2), atol=1e-6), "softmax"
probs = softmax(np.maximum(x @ w1 + b1, 0) @ w2 + b2)
assert np.allclose(run(forward, x, w1, b1, w2, b2), probs, atol=1e-5), "forward"
assert np.array_equal(run(predict, x, w1, b1, w2, b2), probs.argmax(axis=1).astype(np.int32)), "predict"
print("all tests passed")
if args.benchmark:
    bench = nki.benchmark(warmup=5, iters=10)(predict)
    bench(x, w1, b1, w2, b2)
    latency = bench.benchmark_result.nc_latency.get_latency_percentile(50)
    print(f"Execution Time: {latency:.2f} us")
    print("Passed!" if latency < 1000 else "Performance requirement not met")
'''


def _lab(tmp_path: Path) -> Path:
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "tester.py").write_text(TESTER)
    return tmp_path


def _run(lab: Path, *args: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("TRNLAB_NKI_FORCE", "NKI_NC_VERSION")}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    environment["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn1"          # the lab's trn1.2xlarge
    return subprocess.run([sys.executable, "-m", "trnlab.nki", "run", "tester.py", *args], cwd=lab,
                          capture_output=True, text=True, timeout=600, env=environment)


def test_kernels_that_call_kernels_pass_the_labs_checks_through_simulate_kernel(tmp_path):
    done = _run(_lab(tmp_path), "--simulate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all tests passed" in done.stdout


def test_the_labs_benchmark_times_the_prediction_on_trn1_against_its_threshold(tmp_path):
    done = _run(_lab(tmp_path), "--benchmark")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(text for text in done.stdout.splitlines() if text.startswith("Execution Time:"))
    latency = float(line.split()[2])
    assert 0 < latency < 1000, line
    assert "Passed!" in done.stdout


def test_broadcast_to_of_an_hbm_tensor_names_the_rule_and_the_fix():
    @nki.jit
    def spread(b):
        out = nl.ndarray((128, 64), dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(b.broadcast_to((128, 64))))       # the load must come first
        return out

    with pytest.raises(MemoryPlacementError, match=r"broadcast_to of .*HBM.*nl.load the \(1, 64\) slice first"):
        spread(np.ones((1, 64), np.float32))
