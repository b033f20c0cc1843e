"""The free-size limit of an operand counts the memory it spans, not the elements its pattern walks.

AWS's `nl.tile_size` constants state the limit as the free dimension of a tile *on the buffer*
(`psum_fmax`: "Maximum free dimension of a tile on PSUM buffer"; NKI 0.7 `nki.language.tile_size` page).
A broadcast view (a step-0 axis, as the NKI Library's layer norm reads a per-row mean from PSUM against
every column of an SBUF tile) re-reads a few PSUM elements many times: it spans [P, B] of PSUM
whatever the length of the broadcast axis. A pattern that truly spans more than the limit is refused."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import presets
from trnlab.hardware.core import NeuronCore
from trnlab.hardware.errors import FreeSizeError

from nki_isa_helpers import run_both

RNG = np.random.default_rng(5)
B, H1 = 4, 2048          # the broadcast operand walks B * H1 = 8192 elements per partition (> 4096)


@nki.jit
def subtract_row_means(x):
    # x [128, B, H1] in HBM; mean [128, B] in PSUM (a matmul's output), broadcast along H1
    tile = nl.ndarray((128, B, H1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    ones = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0 / 128)
    col = nl.ndarray((128, B), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=col, src=tile[:, :, 0])
    mean = nl.ndarray((128, B), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=mean, stationary=ones, moving=col)      # mean over partitions of column 0
    spread = mean.ap(pattern=[[B, 128], [1, B], [0, H1]], offset=0)   # [128, B, H1], step 0 on H1
    res = nl.ndarray((128, B, H1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=res, data1=tile, data2=spread, op=nl.subtract)
    out = nl.ndarray((128, B, H1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_broadcast_psum_operand_counts_the_elements_it_spans():
    x = RNG.normal(size=(128, B, H1)).astype(np.float32)
    out = run_both(subtract_row_means, x).outputs
    mean = x[:, :, 0].mean(axis=0)                        # [B], the same on every partition
    np.testing.assert_allclose(out, x - mean[None, :, None], rtol=1e-5, atol=1e-5)


def test_psum_operand_spanning_more_than_the_limit_is_refused():
    # an NKI 0.7 PSUM tensor is at most one 2 KiB bank per partition, under the 4096-element limit; a
    # core with a smaller limit shows the rule: a broadcast counts what it spans, a wide read is refused
    core = NeuronCore(presets.TRN2.core.derive(psum_free_max=256))
    acc = core.psum.allocate((128, 512), "float32", name="acc")
    core.memset(acc[:, 0:256], 1.0)
    core.memset(acc[:, 256:512], 1.0)
    rows = np.arange(128)[:, None, None]
    narrow = acc[rows, np.arange(128)[None, :, None] + np.zeros((1, 1, 8), int)]   # walks 1024, spans 128
    wide = acc[rows, np.arange(512)[None, :, None] + np.zeros((1, 1, 2), int)]     # walks 1024, spans 512
    out = core.sbuf.allocate((128, 128, 8), "float32")
    core.tensor_copy(out, narrow)
    assert (out.data == 1.0).all()
    with pytest.raises(FreeSizeError, match="tensor_copy src has 512 elements per partition in PSUM, the limit is 256"):
        core.tensor_copy(core.sbuf.allocate((128, 512, 2), "float32"), wide)
