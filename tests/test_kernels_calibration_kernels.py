"""The kernels of the calibration table compute what their lessons say: vector add (CS149's three
tilings, one buffer or rotating) and the fused Mamba layer (AWS's v1, v2, v3) against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import trnlab.nki as nki
from trnlab.kernels import mamba, vector_add


def _output(run):
    out = run.outputs
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


@pytest.mark.parametrize("kernel, options", [
    (vector_add.vector_add_rows, {"ROW_CHUNK": 1}),
    (vector_add.vector_add_rows, {"ROW_CHUNK": 128}),
    (vector_add.vector_add_rows, {"ROW_CHUNK": 64, "ONE_BUFFER": True}),
    (vector_add.vector_add_stream, {"FREE_DIM": 2}),
    (vector_add.vector_add_stream, {"FREE_DIM": 4, "ONE_BUFFER": True}),
])
def test_vector_add_tilings_all_compute_a_plus_b(kernel, options):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    run = nki.run(kernel, a, b, target="trn2", **options)
    np.testing.assert_allclose(_output(run), a + b, rtol=1e-6)


def test_vector_add_refuses_a_chunk_wider_than_the_partitions():
    vec = nki.ShapeDtype((512,), np.float32)
    with pytest.raises(Exception, match="ROW_CHUNK=256 > 128 partitions"):
        nki.run(vector_add.vector_add_rows, vec, vec, target="trn2", timing_only=True, ROW_CHUNK=256)


def test_one_buffer_per_tile_serialises_the_steps():
    # one-element steps: rotating tiles let many steps' DMAs be in flight at once; with one buffer a
    # step's loads wait until the previous step's add has read the tiles (a DMA latency per step)
    vec = nki.ShapeDtype((256,), np.float32)
    rotating = nki.run(vector_add.vector_add_rows, vec, vec, target="trn2", timing_only=True, ROW_CHUNK=1)
    single = nki.run(vector_add.vector_add_rows, vec, vec, target="trn2", timing_only=True, ROW_CHUNK=1,
                     ONE_BUFFER=True)
    assert single.latency_us > 3 * rotating.latency_us


@pytest.mark.parametrize("kernel, options", [(mamba.mamba_v1, {}), (mamba.mamba_v2, {}),
                                             (mamba.mamba_v2, {"HOIST_DELTA_U": True}), (mamba.mamba_v3, {})])
def test_mamba_versions_compute_the_selective_scan(kernel, options):
    rng = np.random.default_rng(0)
    batch, channels, seq, state = 1, 256, 1024, 3        # v3: two 512-column chunks carry the scan
    delta = rng.uniform(0.01, 0.1, (batch, channels, seq)).astype(np.float32)
    u = rng.standard_normal((batch, channels, seq)).astype(np.float32)
    A = -rng.uniform(0.5, 1.5, (channels, state)).astype(np.float32)
    B, C = (rng.standard_normal((batch, state, seq)).astype(np.float32) for _ in range(2))
    run = nki.run(kernel, delta, u, A, B, C, target="trn1", **options)
    expected = mamba.reference(delta, u, A, B, C)
    np.testing.assert_allclose(_output(run), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
