"""Every kernel of trnlab.kernels runs in timing-only mode at tiny-GPT sizes, and its timing-only
schedule is the schedule of a full run (no kernel decides its instructions from data values)."""
import numpy as np
import pytest

import trnlab.nki as nki
from trnlab.hardware import dtypes
from trnlab.kernels import KERNELS
from trnlab.kernels.workload import gpt_arguments, simulate

SMALL = dict(batch=2, seq=40, d_model=32, n_head=2, vocab=20, dtype="float32")


def _values(argument, rng, vocab):
    """Random values for a ShapeDtype (ids in [0, vocab)); other arguments as they are."""
    if not isinstance(argument, nki.ShapeDtype):
        return argument
    dtype = dtypes.as_dtype(argument.dtype)
    if dtype == dtypes.int32:
        return rng.integers(0, vocab, size=argument.shape).astype(np.int32)
    return rng.standard_normal(argument.shape).astype(dtype)


def test_every_kernel_has_gpt_arguments_and_a_description():
    arguments = gpt_arguments()
    assert set(arguments) == set(KERNELS)
    assert all(isinstance(description, str) and description for _, description in KERNELS.values())


@pytest.mark.parametrize("name", list(KERNELS))
def test_timing_only_schedule_equals_the_full_run(name):
    kernel, _ = KERNELS[name]
    shapes = gpt_arguments(**SMALL)[name]
    rng = np.random.default_rng(0)
    values = [_values(a, rng, SMALL["vocab"]) for a in shapes]
    full = nki.run(kernel, *values)
    timing = nki.run(kernel, *shapes, timing_only=True)
    assert timing.timeline.same_schedule(full.timeline)
    assert timing.latency_ns == full.latency_ns > 0


def test_simulate_reports_every_kernel_on_trn1_and_trn2():
    for target in ("trn1", "trn2"):
        times = simulate(target, **SMALL)
        assert [t.name for t in times] == list(KERNELS)
        assert all(t.latency_us > 0 and t.instructions > 0 for t in times)
