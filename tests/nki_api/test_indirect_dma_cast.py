"""An indirect dma_copy (`.ap(vector_offset= / scalar_offset=)`) between dtypes casts on the way, as a
direct dma_copy does on NeuronCore-v3/-v4 ("A cast will happen if the src and dst have different dtype",
nki.isa.dma_copy); NeuronCore-v2's DMA engines do not convert (refused by name). Values against NumPy,
fast paths on and off."""
import ml_dtypes
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.errors import DtypeError

from nki_kernels import views

RNG = np.random.default_rng(5)


@nki.jit
def gather_rows_as_bf16(table, ids):
    """out[p] = bf16(table[ids[p]]): an fp32 HBM table gathered into a bf16 SBUF tile by one indirect DMA."""
    N, C = table.shape
    P = ids.shape[0]
    idx = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((P, C), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[C, P], [1, C]], vector_offset=idx, indirect_dim=0))
    out = nl.ndarray((P, C), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_an_indirect_gather_between_dtypes_casts_each_row(target, records):
    table = RNG.normal(size=(100, 16)).astype(np.float32)
    ids = RNG.integers(0, 100, size=(64, 1)).astype(np.int32)
    run = nki.run(gather_rows_as_bf16, table, ids, target=target)
    np.testing.assert_array_equal(run.outputs, table[ids[:, 0]].astype(ml_dtypes.bfloat16))
    with config.override(fast=False):
        assert records(nki.run(gather_rows_as_bf16, table, ids, target=target)) == records(run)


def test_an_indirect_scatter_between_dtypes_casts_each_row():
    table = RNG.normal(size=(100, 16)).astype(np.float32)
    ids = RNG.permutation(100)[:64].reshape(64, 1).astype(np.int32)
    values = RNG.normal(size=(64, 16)).astype(ml_dtypes.bfloat16)
    expected = table.copy()
    expected[ids[:, 0]] = values.astype(np.float32)
    np.testing.assert_array_equal(nki.run(views.scatter_rows, table, ids, values).outputs, expected)


def test_neuroncore_v2_dmas_do_not_convert():
    table = np.zeros((10, 16), np.float32)
    with pytest.raises(DtypeError, match="does not convert on NeuronCore-v2"):
        nki.run(gather_rows_as_bf16, table, np.zeros((4, 1), np.int32), target="trn1")
