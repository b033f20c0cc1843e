"""Early PSUM evacuation (trnlab/hardware/psum_evacuation.py): a kernel whose accumulators, copied out
only after every one is computed, do not fit PSUM in the order written runs with each copy moved up
to just after its accumulator's last matmul — the values unchanged, every tile within PSUM."""
import numpy as np
import pytest

import trnlab.nki as nki
from trnlab import config
from trnlab.hardware.errors import PSUMOverflowError
from trnlab.nki import compiler as ncc

from nki_kernels.psum_accumulators import gate_up

RNG = np.random.default_rng(0)


def test_accumulators_that_outgrow_psum_in_written_order_are_copied_out_early():
    x = RNG.random((256, 1024), dtype=np.float32)
    w = RNG.random((256, 128 * 6), dtype=np.float32)     # 2 column blocks x 6 tiles x 2 KiB: 24 KiB > 16
    with pytest.raises(PSUMOverflowError, match="PSUM overflow"):     # off by default: the refusal
        nki.run(gate_up, x, w)
    with config.override(psum_evacuation=True):
        run = nki.run(gate_up, x, w)
    expected = np.stack([w[:, i * 128:(i + 1) * 128].T @ x for i in range(6)])
    np.testing.assert_allclose(run.outputs, expected, rtol=1e-5)
    program = run.program
    assert program.schedule.startswith("evacuated")
    assert program.peak_bytes("psum") <= 16 * 1024


def test_a_kernel_that_skips_the_middle_end_keeps_its_order_and_its_overflow():
    x = RNG.random((256, 1024), dtype=np.float32)
    w = RNG.random((256, 128 * 6), dtype=np.float32)
    kept = ncc.skip_middle_end_transformations(nki.jit(gate_up.func))
    with config.override(psum_evacuation=True), pytest.raises(PSUMOverflowError, match="PSUM overflow"):
        nki.run(kept, x, w)
