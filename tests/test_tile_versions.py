"""Tile versions (trnlab/hardware/versions.py, ASSUMED): a whole overwrite of a reused SBUF tile starts a
new tile the allocator places anew, so a load into a buffer declared outside a loop need not wait for the
previous iteration's readers (a write-after-read on the same bytes); a partial write, an in-place update
and a kernel that places its own bytes keep the tile.

Our own kernels, in the style of a course convolution: one input-row buffer declared before the loop and
loaded whole every row, read by matmuls."""
import numpy as np
import pytest

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.versions import split_versions

P, W, ROWS = 128, 256, 8


@nki.compiler.skip_middle_end_transformations
@nki.jit
def rows_through_one_buffer(x, w):
    """out[r] = w.T @ x[r] for each of x's rows r ([R, 128, W]), every row loaded into one SBUF buffer
    declared before the loop (what the Tensor engine reads while the next row loads)."""
    rows = x.shape[0]
    out = nl.ndarray((rows, P, W), dtype=nl.float32, buffer=nl.shared_hbm)
    w_sb = nl.ndarray((P, P), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_sb, src=w)
    x_sb = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)         # one buffer, every row
    for r in nl.sequential_range(rows):
        nisa.dma_copy(dst=x_sb, src=x[r])                            # a whole overwrite
        acc = nl.ndarray((P, W), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=w_sb, moving=x_sb)
        y = nl.ndarray((P, W), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=acc)
        nisa.dma_copy(dst=out[r], src=y)
    return out


@nki.jit
def half_rows_through_one_buffer(x):
    """out[r] = x[r] + 1 with each row loaded into one buffer in two halves (partial writes)."""
    rows = x.shape[0]
    out = nl.ndarray((rows, P, W), dtype=x.dtype, buffer=nl.shared_hbm)
    x_sb = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
    for r in nl.sequential_range(rows):
        nisa.dma_copy(dst=x_sb[:, :W // 2], src=x[r, :, :W // 2])
        nisa.dma_copy(dst=x_sb[:, W // 2:], src=x[r, :, W // 2:])
        y = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=x_sb, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[r], src=y)
    return out


@nki.jit
def running_sum_in_place(x):
    """out = sum over rows of x, accumulated in place in one SBUF tile (each add reads the tile it writes)."""
    rows = x.shape[0]
    out = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for r in nl.sequential_range(rows):
        row = nl.ndarray((P, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x[r])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((ROWS, P, W)).astype(np.float32), rng.standard_normal((P, P)).astype(np.float32)


def _trace(kernel, *args, versions: bool):
    with config.override(versions=versions):
        return nki.trace(kernel, *args, target="trn2")


def test_a_whole_overwrite_of_a_reused_tile_starts_a_new_version():
    x, w = _inputs()
    kept, split = (_trace(rows_through_one_buffer, x, w, versions=v) for v in (False, True))
    names = {b.name for b in split.buffers}
    assert len(split.buffers) == len(kept.buffers) + ROWS - 1           # one new buffer per row after the first
    assert sum(1 for n in names if "~v" in n) == ROWS - 1
    # each version is written once, by its row's load, and read by that row's matmul only
    for b in split.buffers:
        if "~v" in b.name:
            users = [ins.opcode for ins in split.instructions if any(a.buffer == b.id for a in ins.operands.values())]
            assert users == ["dma_copy", "nc_matmul"]


def test_versions_let_the_next_rows_load_run_while_this_rows_matmul_reads():
    x, w = _inputs()
    runs = {}
    for versions in (False, True):
        with config.override(versions=versions):
            runs[versions] = nki.run(rows_through_one_buffer, nki.ShapeDtype(x.shape, "float32"),
                                     nki.ShapeDtype(w.shape, "float32"), target="trn2", timing_only=True)
    # program order: w's load, then per row its load (1 + 4 r), matmul (2 + 4 r), copy and store. With one
    # set of bytes row r + 1's load waits for row r's matmul (DMA and Tensor engine take turns); with a
    # version per row it runs while the matmul does
    assert runs[True].latency_us < 0.8 * runs[False].latency_us
    waited = {}
    for versions in (False, True):
        at = {i.index: i for i in runs[versions].launch.timeline}
        waited[versions] = [at[5 + 4 * r].start_ns >= at[2 + 4 * r].end_ns for r in range(ROWS - 1)]
    assert all(waited[False]) and not any(waited[True][:4])


def test_versions_do_not_change_the_values():
    x, w = _inputs(1)
    expected = np.einsum("kp,rkw->rpw", w, x)
    for versions in (False, True):
        with config.override(versions=versions):
            out = nki.simulate(rows_through_one_buffer)(x, w)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_partial_writes_keep_the_tile():
    x, _ = _inputs()
    program = _trace(half_rows_through_one_buffer, x, versions=True)
    assert not any("~v" in b.name for b in program.buffers)


def test_an_in_place_update_keeps_the_tile():
    x, _ = _inputs()
    program = _trace(running_sum_in_place, x, versions=True)
    assert not any("~v" in b.name for b in program.buffers)
    out = nki.simulate(running_sum_in_place)(x)
    np.testing.assert_allclose(out, x.sum(axis=0), rtol=1e-4, atol=1e-4)


def test_a_program_without_rewrites_is_returned_as_it_is():
    x, _ = _inputs()
    with config.override(versions=False):
        program = nki.trace(running_sum_in_place, x, target="trn2")
    assert split_versions(program) is program


@pytest.mark.parametrize("versions", [False, True])
def test_the_fast_path_and_the_reference_agree(versions):
    x, w = _inputs()
    args = (nki.ShapeDtype(x.shape, "float32"), nki.ShapeDtype(w.shape, "float32"))
    latencies = []
    for fast in (True, False):
        with config.override(versions=versions, fast=fast):
            latencies.append(nki.run(rows_through_one_buffer, *args, target="trn2", timing_only=True).latency_us)
    assert latencies[0] == latencies[1]
