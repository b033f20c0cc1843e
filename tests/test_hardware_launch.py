"""A kernel execution's start-up and tear-down (CoreSpec.launch_start_ns / launch_end_ns), and the
profile's DMA active as AWS's profiler counts it (Profile.dma_transferring); docs/calibration.md."""
import numpy as np
import pytest

import trnlab.nki as nki
from trnlab.hardware import NeuronCore, presets
from trnlab.kernels import vector_add


def _vector_add(spec):
    vec = nki.ShapeDtype((128 * 200,), np.float32)
    return nki.run(vector_add.vector_add_stream, vec, vec, target=spec, timing_only=True, FREE_DIM=200)


def test_a_kernel_execution_pays_the_start_up_before_it_and_the_tear_down_after_it():
    plain = _vector_add(presets.TRN2.core.derive(launch_start_ns=0.0, launch_end_ns=0.0))
    spec = presets.TRN2.core.derive(launch_start_ns=8_000.0, launch_end_ns=4_000.0)
    run = _vector_add(spec)
    assert run.latency_ns == pytest.approx(plain.latency_ns + 12_000.0)
    assert run.launch.latency_ns == pytest.approx(run.latency_ns)
    starts = [r.start_ns for r in run.timeline]
    assert min(starts) == pytest.approx(8_000.0)                     # nothing of the kernel before it
    profile = run.profile()
    assert profile.total_ns == pytest.approx(run.latency_ns)          # the tear-down is in the profile
    busy = profile.busy_ns["dve"]
    assert busy == pytest.approx(plain.profile().busy_ns["dve"])      # the engines' work is unchanged
    assert profile.active["dve"] == pytest.approx(busy / run.latency_ns)


def test_every_preset_pays_a_start_up_and_the_one_step_kernel_shows_it():
    # docs/calibration.md, "The model": Trn1 read off AWS's Mamba profile, Trn2 / Trn3 fitted on
    # CS149's one-step kernel; a one-step kernel's latency is mostly start-up on every chip
    assert all(core.launch_start_ns > 0 and core.launch_end_ns > 0 for core in presets.CORES.values())
    for core in presets.CORES.values():
        run = _vector_add(core)
        start_up = core.launch_start_ns + core.launch_end_ns
        assert core.launch_ns == start_up
        bare = _vector_add(core.derive(launch_start_ns=0.0, launch_end_ns=0.0))
        assert run.latency_ns == pytest.approx(bare.latency_ns + start_up)
        assert start_up > 0.5 * run.latency_ns


def test_dma_transferring_counts_a_transfer_from_the_end_of_its_fixed_latency():
    core = NeuronCore(presets.TRN2.core, mode="timing")
    src = core.hbm.tensor(np.zeros((128, 512), np.float32))
    dst = core.sbuf.allocate((128, 512), "float32")
    core.dma_copy(dst, src)
    (record,) = list(core.timeline)
    profile = core.profile()
    assert profile.dma_any_ns == pytest.approx(record.end_ns - record.start_ns)
    assert profile.dma_moving_ns == pytest.approx(record.end_ns - record.start_ns - core.spec.dma_latency_ns)
    assert 0 < profile.dma_transferring < profile.active["dma (any queue)"]
