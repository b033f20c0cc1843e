"""SBUF tiles that do not fit are spilled to HBM (trnlab.hardware.spill, ASSUMED: AWS does not
document what its compiler does when a kernel's live tiles exceed SBUF), and the profile says so.

Our own blocked matmul in the style of AWS's matrix-multiplication tutorial: a row block of `lhsT`
tiles and a column block of `rhs` tiles loaded whole, then every (row, column) tile of the block.
At K = 1024 in fp32 its blocks hold 40 KiB per partition; on a core with 32 KiB of SBUF per
partition some must go back to HBM and come back before they are used."""
import warnings

import numpy as np
import pytest

import trnlab.nki as nki
from trnlab import config
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import presets
from trnlab.hardware.errors import SBUFOverflowError, UninitializedReadError
from trnlab.hardware.spill import SpillWarning

SMALL_SBUF = presets.TRN1.core.derive(sbuf_partition_bytes=32 * 1024)


@pytest.fixture(autouse=True)
def spilling():
    with config.override(spill=True):          # TRNLAB_SPILL=1
        yield
BLOCK_M, BLOCK_N = 2, 2


@nki.jit
def blocked_matmul(lhsT, rhs, scale_rhs=False):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (128 * BLOCK_M)):
        lhsT_tiles = []
        for bm in nl.affine_range(BLOCK_M):
            for k in nl.affine_range(K // 128):
                tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)      # [K, M] fp32
                nisa.dma_copy(dst=tile, src=lhsT[k * 128:(k + 1) * 128,
                                                 (m * BLOCK_M + bm) * 128:(m * BLOCK_M + bm + 1) * 128])
                lhsT_tiles.append(tile)
        for n in nl.affine_range(N // (512 * BLOCK_N)):
            rhs_tiles = []
            for bn in nl.affine_range(BLOCK_N):
                for k in nl.affine_range(K // 128):
                    tile = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)   # [K, N] fp32
                    nisa.dma_copy(dst=tile, src=rhs[k * 128:(k + 1) * 128,
                                                    (n * BLOCK_N + bn) * 512:(n * BLOCK_N + bn + 1) * 512])
                    if scale_rhs:        # a tile computed on chip: no copy of it is left in HBM
                        scaled = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.tensor_scalar(dst=scaled, data=tile, op0=nl.multiply, operand0=2.0)
                        tile = scaled
                    rhs_tiles.append(tile)
            for bm in nl.affine_range(BLOCK_M):
                for bn in nl.affine_range(BLOCK_N):
                    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // 128):
                        nisa.nc_matmul(dst=acc, stationary=lhsT_tiles[bm * (K // 128) + k],
                                       moving=rhs_tiles[bn * (K // 128) + k])
                    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out, src=acc)
                    row, col = (m * BLOCK_M + bm) * 128, (n * BLOCK_N + bn) * 512
                    nisa.dma_copy(dst=result[row:row + 128, col:col + 512], src=out)
    return result


def _inputs(K=1024, M=256, N=1024, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(K, M)).astype(np.float32), rng.normal(size=(K, N)).astype(np.float32)


def test_tiles_that_do_not_fit_are_spilled_and_the_result_is_unchanged():
    lhsT, rhs = _inputs()
    with pytest.warns(SpillWarning, match=r"spilled to HBM"):
        run = nki.run(blocked_matmul, lhsT, rhs, target=SMALL_SBUF)
    np.testing.assert_allclose(run.outputs, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)
    profile = run.profile()
    assert profile.spilled_bytes > 0
    assert "spilled bytes" in profile.summary()
    assert profile.warnings and all("test_semantics_spill.py" in w for w in profile.warnings)


def test_a_kernel_that_fits_spills_nothing():
    lhsT, rhs = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpillWarning)
        run = nki.run(blocked_matmul, lhsT, rhs, target="trn1", timing_only=True)
    assert run.profile().spilled_bytes == 0 and run.profile().warnings == []


def test_spilled_loads_from_the_inputs_are_loaded_again_and_cost_their_dmas():
    lhsT, rhs = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)      # (said once, when the program is traced)
        spilled = nki.run(blocked_matmul, lhsT, rhs, target=SMALL_SBUF, timing_only=True)
    roomy = nki.run(blocked_matmul, lhsT, rhs, target="trn1", timing_only=True)
    extra = spilled.profile().hbm_bytes - roomy.profile().hbm_bytes
    assert extra == spilled.profile().spilled_bytes > 0          # reloads only: no stores
    assert spilled.latency_ns > roomy.latency_ns


def test_a_tile_computed_on_chip_is_stored_to_hbm_and_loaded_back():
    lhsT, rhs = _inputs(seed=1)
    with pytest.warns(SpillWarning):
        run = nki.run(blocked_matmul, lhsT, rhs, True, target=SMALL_SBUF)
    np.testing.assert_allclose(run.outputs, lhsT.T @ (2 * rhs), rtol=1e-4, atol=1e-3)
    stores = [r for r in run.timeline if r.note.startswith("spill: store")]
    assert stores


def test_without_the_switch_an_overflow_is_refused():
    lhsT, rhs = _inputs()
    with config.override(spill=False), pytest.raises(SBUFOverflowError, match="SBUF"):
        nki.run(blocked_matmul, lhsT, rhs, target=SMALL_SBUF, timing_only=True)


def test_an_instruction_whose_own_tiles_exceed_sbuf_is_still_refused():
    tiny = presets.TRN1.core.derive(sbuf_partition_bytes=4 * 1024)

    @nki.jit
    def wide_add(a_tensor):
        out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a_tensor), nl.load(a_tensor)))   # [128, 2048] fp32: 8 KiB each
        return out

    with pytest.raises(SBUFOverflowError, match="cannot make it fit"):
        nki.run(wide_add, np.ones((128, 2048), np.float32), target=tiny, timing_only=True)


def test_a_spill_slot_keeps_the_garbage_of_a_partly_written_tile_until_it_comes_back():
    from trnlab.hardware import NeuronCore
    from trnlab.hardware.dma import SPILL_SLOT
    core = NeuronCore(presets.TRN1.core, mode="full")
    tile = core.sbuf.allocate((128, 64), "float32", name="tile")
    core.memset(tile[:, 0:32], 1.0)                          # columns 32.. never written
    slot = core.hbm.allocate((128, 64), "float32", name=f"{SPILL_SLOT}tile")
    core.dma_copy(slot, tile)                                # no error: a spill store
    back = core.sbuf.allocate((128, 64), "float32", name="back")
    core.dma_copy(back, slot)
    out = core.hbm.allocate((128, 64), "float32", name="out")
    core.dma_copy(out[:, 0:32], back[:, 0:32])               # the written half: fine
    with pytest.raises(UninitializedReadError):
        core.dma_copy(out[:, 32:], back[:, 32:])             # the garbage reaches an output
