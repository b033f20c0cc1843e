"""Helpers for the tests of single nki.isa instructions: run a kernel with the fast paths on and off
(TRNLAB_FAST=1 / 0) and check both give the same values and the same timeline."""
import numpy as np

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config

from nki_kernels.tiles import hbm_copy, sbuf_copy  # noqa: F401  (the nki_api tests' tile helpers)


def _records(run):
    return [(r.engine, r.opcode, r.start_ns, r.end_ns) for r in (run.timeline[i] for i in range(len(run.timeline)))]


def run_both(kernel, *args, target="trn2"):
    """The kernel's run with the fast paths on, after checking the reference (fast off) agrees."""
    runs = []
    for fast in (False, True):
        with config.override(fast=fast):
            runs.append(nki.run(kernel, *args, target=target))
    reference, fast = runs
    outputs = fast.outputs if isinstance(fast.outputs, tuple) else (fast.outputs,)
    expected = reference.outputs if isinstance(reference.outputs, tuple) else (reference.outputs,)
    for a, b in zip(outputs, expected):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert _records(fast) == _records(reference)
    return fast


def compute_records(run):
    """(engine, opcode, duration ns) of every instruction that is not a DMA."""
    return [(r.engine, r.opcode, r.duration_ns) for r in (run.timeline[i] for i in range(len(run.timeline)))
            if not r.engine.startswith("dma")]


def load_scalar(hbm):
    """An NkiScalar holding the one value of an HBM tensor [1, 1] (loaded to SBUF, then a register)."""
    tile = nl.ndarray((1, 1), dtype=hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=hbm)
    return nisa.scalar_load(tile)

