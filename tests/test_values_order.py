"""Full mode's values replay computes a program's values with less copying and with its PSUM
products in parallel (trnlab.hardware.fast: later PSUM reads, products started when their K
loop ends, loads without a copy, moving PSUM -> SBUF copies) — and gets the bits of program order:
the checked replay, which issues every instruction to the core in order, is the reference."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import _blas, dtypes, replay
from trnlab.hardware.fast.values_core import ValuesCore
from trnlab.hardware.fast import psum_pool, values_replay
from trnlab.hardware.fast import values_order as ordering
from trnlab.hardware.program import ProgramCache
from trnlab.hardware.device import Device
from trnlab.kernels import matmul_ladder as ladder


@pytest.fixture(autouse=True)
def _fast_paths_on():
    """These tests check the fast paths themselves: on, even in CI's run with TRNLAB_FAST=0."""
    with config.override(fast=True):
        yield


def _checked(kernel, *args):
    """The kernel's output through the checked replay (every instruction in program order)."""
    program = nki.trace(kernel, *args)
    tensors = replay.execute(program, Device("trn2", cores=1).cores[0], list(args), checked=True)
    return replay.read_outputs(program, tensors, True)


def _inputs(K, M, N, seed, dtype):
    rng = np.random.default_rng(seed)
    lhsT = rng.standard_normal((K, M)).astype(np.float32)
    rhs = rng.standard_normal((K, N)).astype(np.float32)
    if dtype == "bfloat16":
        lhsT, rhs = dtypes.cast(lhsT, dtypes.bfloat16), dtypes.cast(rhs, dtypes.bfloat16)
    return lhsT, rhs


@settings(max_examples=12, deadline=None)
@given(kernel=st.sampled_from([ladder.matmul_tiled, ladder.matmul_hoisted]),
       k_tiles=st.integers(1, 4), m_tiles=st.integers(1, 3), n_tiles=st.integers(1, 3),
       dtype=st.sampled_from(["float32", "bfloat16"]), seed=st.integers(0, 1000))
def test_parallel_values_replay_gives_the_bits_of_program_order(kernel, k_tiles, m_tiles, n_tiles, dtype, seed):
    """Products computed in worker threads beside later instructions, reads moved later, loads
    as views of HBM: the same bits as the checked replay, for any tile counts and dtype."""
    lhsT, rhs = _inputs(128 * k_tiles, 128 * m_tiles, 512 * n_tiles, seed, dtype)
    fast = kernel(lhsT, rhs)
    assert np.array_equal(np.asarray(fast), np.asarray(_checked(kernel, lhsT, rhs)))


def test_tiled_matmul_reads_each_psum_tile_after_the_next_tiles_k_loop(monkeypatch):
    """The 1024^3-style tiled kernel in program order: every PSUM read but the last is moved after
    the next output tile's matmuls, each tile's last matmul starts its products, and every input
    load is a view."""
    monkeypatch.setattr(nki, "SCHEDULE", "program")   # the list schedule may have moved the reads already
    lhsT, rhs = _inputs(256, 256, 1024, 0, "float32")
    program = nki.trace(ladder.matmul_tiled, lhsT, rhs)
    order, starts = ordering.values_order(_plain_steps(program), program.buffers, ahead=1)
    opcodes = [program.instructions[k].opcode for k in order]
    reads = [i for i, op in enumerate(opcodes) if op == "tensor_copy"]
    matmuls = [i for i, op in enumerate(opcodes) if op == "nc_matmul"]
    tiles = 4                                   # (M / 128) x (N / 512) output tiles, K loop of 2
    assert len(reads) == tiles and len(starts) == tiles
    for r, read in enumerate(reads[:-1]):       # read r comes after the matmuls of tile r + 1
        assert read > matmuls[2 * (r + 1) + 1]
    assert sorted(order) == list(range(len(program.instructions)))
    variants = [step[-1] for step in values_replay.values_plan(program)]
    assert variants.count("dma_load_aliasing") == 2 * 2 * tiles
    assert variants.count("tensor_copy_moving") == tiles
    assert ordering.values_order(_plain_steps(program), program.buffers, ahead=0) == (
        list(range(len(program.instructions))), set())


def _plain_steps(program):
    """values_plan's steps without the fields values_order adds (index, variant)."""
    return [step[:5] for step in sorted(values_replay.values_plan(program), key=lambda s: s[5])]


@nki.jit
def _read_inside_another_accumulation(lhsT, rhs):
    """Two PSUM tiles: tile b is read while tile a is still accumulating (between its matmuls)."""
    out_a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    out_b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    tiles = []
    for k in range(2):
        st_tile = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        mv_tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=st_tile, src=lhsT[k * 128:(k + 1) * 128, 0:128])
        nisa.dma_copy(dst=mv_tile, src=rhs[k * 128:(k + 1) * 128, 0:512])
        tiles.append((st_tile, mv_tile))
    nisa.nc_matmul(dst=a, stationary=tiles[0][0], moving=tiles[0][1])
    nisa.nc_matmul(dst=b, stationary=tiles[1][0], moving=tiles[1][1])
    b_sbuf = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=b_sbuf, src=b)                 # read b: a's group is cut here (flushed)
    nisa.nc_matmul(dst=a, stationary=tiles[1][0], moving=tiles[1][1])
    a_sbuf = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=a_sbuf, src=a)
    nisa.dma_copy(dst=out_a, src=a_sbuf)
    nisa.dma_copy(dst=out_b, src=b_sbuf)
    return out_a, out_b


def test_a_read_inside_another_tiles_accumulation_keeps_program_order(monkeypatch):
    """Where a read cuts another tile's accumulation (that group is computed in two parts), moving
    reads could change where it is cut — and so the rounding: such a program keeps program order,
    and its values are the checked replay's. (Traced in program order, where the kernel puts the
    read inside the accumulation; the list schedule may move it out.)"""
    monkeypatch.setattr(nki, "SCHEDULE", "program")
    lhsT, rhs = _inputs(256, 128, 512, 3, "float32")
    program = nki.trace(_read_inside_another_accumulation, lhsT, rhs)
    assert ordering.values_order(_plain_steps(program), program.buffers, ahead=4) == (
        list(range(len(program.instructions))), set())
    fast = _read_inside_another_accumulation(lhsT, rhs)
    program_order = _checked(_read_inside_another_accumulation, lhsT, rhs)
    for x, y in zip(fast, program_order):
        assert np.array_equal(np.asarray(x), np.asarray(y))


@nki.jit
def _load_then_overwrite_the_source(lhsT, rhs, scratch):
    """Loads a tile from `scratch`, then writes `scratch` before the matmul that uses the tile."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    st_tile = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    mv_tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=st_tile, src=scratch[0:128, 0:128])
    nisa.dma_copy(dst=mv_tile, src=rhs[0:128, 0:512])
    other = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=other, src=lhsT[0:128, 0:128])
    nisa.dma_copy(dst=scratch[0:128, 0:128], src=other)      # the loaded tile's source changes
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st_tile, moving=mv_tile)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_a_load_from_hbm_the_program_writes_is_a_copy():
    """A load whose HBM source the program writes later must keep the values it loaded: it is not
    made a view (only sources no instruction writes are), and the result is the checked replay's."""
    lhsT, rhs = _inputs(128, 128, 512, 5, "float32")
    scratch = np.random.default_rng(6).standard_normal((128, 128)).astype(np.float32)
    program = nki.trace(_load_then_overwrite_the_source, lhsT, rhs, scratch)
    variants = {program.instructions[s[5]].operands["src"].buffer: s[-1]
                for s in values_replay.values_plan(program) if s[0] == "dma_copy" and s[-1]}
    scratch_id = dict(program.inputs)["scratch"]
    rhs_id = dict(program.inputs)["rhs"]
    assert scratch_id not in variants and variants.get(rhs_id) == "dma_load_aliasing"
    fast = _load_then_overwrite_the_source(lhsT, rhs, scratch)
    expected = scratch.T @ rhs
    assert np.array_equal(np.asarray(fast), np.asarray(_checked(_load_then_overwrite_the_source, lhsT, rhs, scratch)))
    np.testing.assert_allclose(fast, expected, rtol=1e-5, atol=1e-4)


def test_a_source_sharing_memory_with_a_written_tensor_is_copied():
    """At run time, a load's source that shares memory with a tensor the program writes (a resident
    tensor and a reshaped alias of it as two arguments) is copied, not viewed."""
    lhsT, rhs = _inputs(128, 128, 512, 1, "float32")
    program = nki.trace(ladder.matmul_tiled, lhsT, rhs)
    core = Device("trn2", cores=1, mode="full").cores[0]
    tensors = replay.bind_inputs(program, core, [lhsT, rhs])
    values = ValuesCore(core.spec)
    prepared = values_replay._prepared(values, program, {"sbuf": values.sbuf, "psum": values.psum})
    sources = values_replay._safe_alias_sources(prepared, tensors)
    assert {id(tensors[b]) for b in prepared.alias_sources} == set(sources)
    out_bid = prepared.written_hbm[0]
    rhs_bid = dict(program.inputs)["rhs"]
    tensors[out_bid]._data = tensors[rhs_bid]._data[:128].reshape(tensors[out_bid].shape)
    assert id(tensors[rhs_bid]) not in values_replay._safe_alias_sources(prepared, tensors)


@settings(max_examples=60, deadline=None)
@given(blocks=st.integers(2, 9), rows=st.integers(1, 200), cols=st.integers(2, 160),
       partner=st.integers(2, 600), width_extra=st.integers(0, 50), offset=st.integers(0, 40),
       seed=st.integers(0, 10**6))
def test_adjacent_row_blocks_stack_as_a_view_with_the_bits_of_a_copy(blocks, rows, cols, partner,
                                                                    width_extra, offset, seed):
    """Consecutive row blocks of one matrix (tiles loaded without a copy) stack into a view of it,
    and the product of that view is bit for bit the product of their concatenated copy (BLAS gemm
    on one thread: M, N >= 2)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((blocks * rows + 3, offset + cols + width_extra)).astype(np.float32)
    parts = [base[1 + b * rows:1 + (b + 1) * rows, offset:offset + cols] for b in range(blocks)]
    view = psum_pool._adjacent_rows(parts)
    assert view is not None and np.shares_memory(view, base)
    copy = np.concatenate(parts)
    assert np.array_equal(view, copy)
    moving = rng.standard_normal((blocks * rows, partner)).astype(np.float32)
    with _blas.single_threaded():
        assert np.array_equal(view.T @ moving, copy.T @ moving)
    gapped = parts[:1] + [base[2 + rows:2 + 2 * rows, offset:offset + cols]]
    assert psum_pool._adjacent_rows(gapped) is None            # not consecutive: concatenated as before
    assert psum_pool._adjacent_rows([p[:, :1] for p in parts]) is None   # one column: matrix-vector


def test_started_products_are_waited_for_before_blas_threads_change():
    """Every product started in a worker has finished when run_values returns (BLAS's thread count
    is restored only then), and an error in one is raised by finish_started."""
    lhsT, rhs = _inputs(512, 256, 1024, 2, "float32")
    ladder.matmul_tiled(lhsT, rhs)
    spec = Device("trn2").spec
    idle = values_replay._idle_values_cores[id(spec)][1]
    assert idle and all(psum_pool.products(v.psum).started == [] for v in idle)
    psum = psum_pool.products(idle[-1].psum)
    future = psum_pool._executor().submit(lambda: 1 / 0)
    psum.started.append(future)
    with pytest.raises(ZeroDivisionError):
        psum.finish_started()
    assert psum.started == []


def test_concurrent_runs_of_one_program_take_different_values_cores():
    """Two threads running the same kernel at once (a server's requests) each get a values core of
    their own, and the results are those of runs one after another."""
    import threading
    inputs = [_inputs(256, 256, 1024, seed, "float32") for seed in (7, 8, 9, 10)]
    alone = [np.asarray(ladder.matmul_tiled(*x)) for x in inputs]
    together = [None] * len(inputs)

    def run(i):
        together[i] = np.asarray(ladder.matmul_tiled(*inputs[i]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(a, b) for a, b in zip(alone, together))


def test_arguments_the_program_never_writes_are_bound_without_a_copy():
    """A launch's argument that no instruction writes holds the caller's array itself; one the
    kernel writes is a copy, so the caller's array keeps its values."""
    lhsT, rhs = _inputs(128, 128, 512, 11, "float32")
    scratch = np.random.default_rng(12).standard_normal((128, 128)).astype(np.float32)
    before = scratch.copy()
    program = nki.trace(_load_then_overwrite_the_source, lhsT, rhs, scratch)
    core = Device("trn2", cores=1, mode="full").cores[0]
    tensors = replay.bind_inputs(program, core, [lhsT, rhs, scratch])
    ids = dict(program.inputs)
    assert np.shares_memory(tensors[ids["lhsT"]]._data, lhsT)
    assert np.shares_memory(tensors[ids["rhs"]]._data, rhs)
    assert not np.shares_memory(tensors[ids["scratch"]]._data, scratch)
    _load_then_overwrite_the_source(lhsT, rhs, scratch)
    assert np.array_equal(scratch, before)


def test_a_reader_computes_the_products_no_worker_has_started():
    """On a busy machine the workers may not have begun a tile's products when the tile is read:
    the reader computes them itself (it has a core now) — with every worker held up, the kernel
    still finishes, with the bits of program order."""
    import threading
    release = threading.Event()
    blockers = [psum_pool._executor().submit(release.wait) for _ in range(_blas.workers())]
    lhsT, rhs = _inputs(256, 256, 1024, 13, "float32")
    result = []
    runner = threading.Thread(target=lambda: result.append(ladder.matmul_tiled(lhsT, rhs)))
    try:
        runner.start()
        runner.join(timeout=120)                        # every started product is taken back
        assert result, "the run waited for products no worker could start"
        out = result[0]
    finally:
        release.set()
        for b in blockers:
            b.result()
        runner.join()
    assert np.array_equal(np.asarray(out), np.asarray(_checked(ladder.matmul_tiled, lhsT, rhs)))


@settings(max_examples=10, deadline=None)
@given(m_blocks=st.integers(1, 3), n_blocks=st.integers(1, 3), k_tiles=st.integers(1, 4),
       dtype=st.sampled_from(["float32", "bfloat16"]), seed=st.integers(0, 1000))
def test_a_moved_psum_read_leaves_later_tiles_groups_whole(m_blocks, n_blocks, k_tiles, dtype, seed):
    """The reference GEMM interleaves the K loops of a block's four PSUM tiles, so a read moved
    after later tiles' K loops comes while another block's tiles are half accumulated: waiting for
    the read tile's products must not compute (and so cut in two) those groups. Full-mode
    `run_gemm` (the program, values replayed in parallel) gives the bits of the checked replay
    and of the instructions issued one by one to a core."""
    from trnlab.hardware import gemm
    from trnlab.hardware.core import NeuronCore
    M, N, K = 256 * m_blocks, 1024 * n_blocks, 128 * k_tiles
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C, _ = gemm.run_gemm(A, B, dtype=dtype)
    program = gemm.gemm_program(M, N, K, "trn2", dtype)
    lhsT, rhs = gemm._gemm_inputs(A, B, dtypes.as_dtype(dtype))
    tensors = replay.execute(program, Device("trn2", cores=1).cores[0], [lhsT, rhs], checked=True)
    np.testing.assert_array_equal(C, replay.read_outputs(program, tensors, True))
    core = NeuronCore("trn2", mode="full")
    out = core.hbm.allocate((M, N), "float32", name="out")
    gemm.tiled_gemm(core, core.hbm.tensor(lhsT), core.hbm.tensor(rhs), out)
    np.testing.assert_array_equal(C, out.data)


def test_bf16_inputs_whose_memory_another_dtype_owns_widen_correctly():
    """An input's array may be a view of memory another array owns in another dtype (a torch
    bf16 tensor reaches NumPy as raw 16-bit words viewed as bf16): the fp32 widening of a whole
    input casts the input's own array, not its owner."""
    lhsT, rhs = _inputs(256, 256, 1024, 7, "bfloat16")
    words_l, words_r = lhsT.view(np.uint16).copy(), rhs.view(np.uint16).copy()   # owners: uint16
    lhsT_v, rhs_v = words_l.view(dtypes.bfloat16), words_r.view(dtypes.bfloat16)
    assert lhsT_v.base is words_l
    out = ladder.matmul_tiled(lhsT_v, rhs_v)
    np.testing.assert_array_equal(out, _checked(ladder.matmul_tiled, lhsT, rhs))


def test_a_gemm_blocks_tiles_sharing_rhs_columns_compute_as_one_product(monkeypatch):
    """The four PSUM tiles of a reference-GEMM block end their K loops together: their products
    start together (`nc_matmul_ready` then `nc_matmul_starting`), and the two tiles of each rhs
    column block merge into one product over both M tiles — with the bits of the checked replay
    (test_a_moved_psum_read_leaves_later_tiles_groups_whole)."""
    from trnlab.hardware import gemm
    monkeypatch.setattr(values_replay, "reads_ahead", lambda: 2)     # as on any machine of 2+ cores
    monkeypatch.setattr(gemm, "_PROGRAMS", ProgramCache(16))
    program = gemm.gemm_program(512, 2048, 256, "trn2", "bfloat16")
    variants = [step[-1] for step in values_replay.values_plan(program)]
    assert variants.count("nc_matmul_starting") == 4 and variants.count("nc_matmul_ready") == 12
    sizes = []
    batches = psum_pool._batches
    monkeypatch.setattr(psum_pool, "_batches", lambda jobs: sizes.extend(len(b) for b in batches(jobs)) or batches(jobs))
    rng = np.random.default_rng(5)
    gemm.run_gemm(rng.standard_normal((512, 256)), rng.standard_normal((256, 2048)))
    assert sorted(sizes) == [2] * 8                   # 4 blocks x 2 merged products
