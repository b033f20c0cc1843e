"""Course profiling steps: nki.benchmark(save_neff_name=...) writes the run's program, and
`python -m trnlab.nki profile FILE` prints neuron-profile's summary fields, each checked here against
the kernel's own shapes or the run's timeline (kernels of our own in AWS's style)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware.program import Program
from trnlab.nki import profile_summary

ROOT = Path(__file__).resolve().parents[1]
K, M, N = 256, 128, 512


@nki.jit
def matmul_kt(a_t, b):
    """[K, M]^T @ [K, N] in K tiles of 128 accumulated in PSUM: 2 loads per tile, 1 store."""
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a_t.shape[0] // 128):
        a_tile = nl.load(a_t[k * 128:(k + 1) * 128, :])
        b_tile = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nl.matmul(a_tile, b_tile, transpose_x=True)
    result = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    nl.store(out, value=result)
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "matmul.neff"
    bench = nki.benchmark(warmup=2, iters=3, save_neff_name=str(path))(matmul_kt)
    a_t = np.random.default_rng(0).standard_normal((K, M)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((K, N)).astype(np.float32)
    out = bench(a_t, b)
    np.testing.assert_allclose(out, a_t.T @ b, rtol=1e-4, atol=1e-3)
    return path, bench.benchmark_result, profile_summary.summary(profile_summary.replay(str(path)))


def test_save_neff_name_writes_the_runs_program(saved):
    path, result, _ = saved
    program = Program.load(path)
    assert program.name == "matmul_kt"
    assert len(program.instructions) == len(result.run.program.instructions)


def test_total_time_is_the_benchmarks_latency_in_seconds(saved):
    _, result, fields = saved
    assert fields["total_time"] == pytest.approx(result.latency_ns * 1e-9, rel=1e-12)
    assert fields["total_time"] == pytest.approx(result.nc_latency.get_latency_percentile(99) * 1e-6)


def test_dma_fields_count_the_kernels_transfers_and_bytes(saved):
    _, _, fields = saved
    tiles = K // 128
    assert fields["dma_transfer_count"] == 2 * tiles + 1                  # two loads per K tile, one store
    loaded = K * M * 4 + K * N * 4
    stored = M * N * 4
    assert fields["dma_transfer_total_bytes"] == loaded + stored
    assert fields["dma_transfer_average_bytes"] == pytest.approx((loaded + stored) / (2 * tiles + 1))
    assert fields["hbm_read_bytes"] == loaded and fields["hbm_write_bytes"] == stored


def test_tensor_engine_fields_count_the_matmuls_and_flops(saved):
    _, _, fields = saved
    assert fields["matmul_instruction_count"] == K // 128
    assert fields["tensor_engine_instruction_count"] == K // 128
    assert fields["hardware_flops"] == 2 * M * N * K


@pytest.mark.parametrize("engine, name", [("pe", "tensor_engine"), ("dve", "vector_engine"),
                                          ("act", "scalar_engine"), ("pool", "gpsimd_engine")])
def test_engine_active_time_is_the_engines_busy_time_on_the_timeline(saved, engine, name):
    _, result, fields = saved
    records = result.run.timeline.for_engine(engine)
    busy_s = sum(r.end_ns - r.start_ns for r in records) * 1e-9
    assert fields[f"{name}_active_time"] == pytest.approx(busy_s, rel=1e-9, abs=1e-15)
    assert fields[f"{name}_active_time_percent"] == pytest.approx(100 * busy_s / fields["total_time"], abs=1e-9)
    assert fields[f"{name}_instruction_count"] == len(records)


def test_dma_active_time_is_when_any_queue_moves_data(saved):
    _, result, fields = saved
    spans = sorted((r.start_ns, r.end_ns) for r in result.run.timeline if r.engine.startswith("dma"))
    covered, reach = 0.0, -1.0
    for start, end in spans:                       # union of the intervals
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    assert fields["dma_active_time"] == pytest.approx(covered * 1e-9)
    assert fields["dma_active_time_percent"] == pytest.approx(100 * covered * 1e-9 / fields["total_time"])


def test_mfu_and_mbu_follow_from_flops_bytes_and_the_preset(saved):
    _, result, fields = saved
    spec = result.run.core.spec
    seconds = fields["total_time"]
    assert fields["mfu_estimated_percent"] == pytest.approx(
        100 * fields["hardware_flops"] / seconds / spec.peak_flops(np.float32))
    hbm = fields["hbm_read_bytes"] + fields["hbm_write_bytes"]
    assert fields["mbu_estimated_percent"] == pytest.approx(100 * hbm / seconds / spec.hbm_bandwidth)


def test_the_command_prints_the_fields_alphabetically_and_as_json(saved):
    path, _, fields = saved
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    text = subprocess.run([sys.executable, "-m", "trnlab.nki", "profile", str(path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    names = [line.split()[0] for line in text.stdout.splitlines()]
    assert names == sorted(fields)
    assert f"dma_transfer_count" in text.stdout and str(fields["dma_transfer_count"]) in text.stdout
    as_json = subprocess.run([sys.executable, "-m", "trnlab.nki", "profile", "-n", str(path),
                              "--output-format", "summary-json"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert json.loads(as_json.stdout) == pytest.approx(fields)


def test_a_file_that_is_no_program_is_refused(tmp_path):
    bogus = tmp_path / "file.neff"
    bogus.write_text("{}")
    done = subprocess.run([sys.executable, "-m", "trnlab.nki", "profile", str(bogus)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a program trnlab saved" in done.stderr


def test_nki_profile_writes_the_program_under_save_neff_name(tmp_path):
    a_t = np.ones((128, M), np.float32)
    b = np.ones((128, N), np.float32)
    nki.profile(working_directory=str(tmp_path), save_neff_name="k.neff", save_trace_name="k.ntff")(matmul_kt)(a_t, b)
    assert Program.load(tmp_path / "k.neff").name == "matmul_kt"
    with pytest.raises(FileExistsError, match="k.neff"):
        nki.profile(working_directory=str(tmp_path), save_neff_name="k.neff",
                    save_trace_name="other.ntff")(matmul_kt)(a_t, b)


def test_baremetal_with_save_neff_name_writes_it_and_returns_outputs(tmp_path):
    a_t = np.ones((128, M), np.float32)
    b = np.ones((128, N), np.float32)
    out = nki.baremetal(save_neff_name=str(tmp_path / "bm.neff"))(matmul_kt)(a_t, b)
    np.testing.assert_allclose(out, a_t.T @ b)
    assert (tmp_path / "bm.neff").exists()


LAB = '''
import sys
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def vector_add_stream(a, b, free):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1] // free):
        x = nl.load(a[:, i * free:(i + 1) * free])
        y = nl.load(b[:, i * free:(i + 1) * free])
        nl.store(out[:, i * free:(i + 1) * free], value=nl.add(x, y))
    return out


free = int(sys.argv[1])
a = np.ones((128, 2000), np.float32)
bench = nki.benchmark(warmup=5, iters=10, save_neff_name=f"stream_{free}.neff",
                      save_trace_name=f"stream_{free}.ntff")(vector_add_stream)
bench(a, a, free)
'''


def test_a_course_profiling_step_end_to_end(tmp_path):
    """As a lab does it: benchmark with save_neff_name, then read dma_transfer_count and total_time."""
    (tmp_path / "lab.py").write_text(LAB)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    counts = {}
    for free in (1000, 500):
        ran = subprocess.run([sys.executable, "-m", "trnlab.nki", "run", "lab.py", str(free)], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        shown = subprocess.run([sys.executable, "-m", "trnlab.nki", "profile", "-n", f"stream_{free}.neff",
                                "-s", f"stream_{free}.ntff", "--output-format", "summary-json"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        fields = json.loads(shown.stdout)
        assert fields["total_time"] > 0
        counts[free] = fields["dma_transfer_count"]
    assert counts == {1000: 3 * 2, 500: 3 * 4}          # two loads and a store per tile
