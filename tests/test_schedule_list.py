"""The list schedule: a per-engine order that keeps every dependency, the values and the memory of
program order, and lets independent iterations overlap."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.compiler as ncc
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import instruction_order, presets
from trnlab.hardware.device import Device
from trnlab.hardware.list_schedule import list_order
from trnlab.hardware.program import WRITES
from trnlab.kernels import matmul_ladder as ladder

SD = nki.ShapeDtype


@pytest.fixture(autouse=True)
def program_order_traces(monkeypatch):
    """nki.trace gives program order here: each test schedules it itself."""
    monkeypatch.setattr(nki, "SCHEDULE", "program")
F = 64                                   # free size of every SBUF tile of the random kernels


# -- an oracle of the dependencies, independent of the scheduler's boxes and records ----------------
def _masks(program):
    """Per instruction: [(buffer id, element mask, writes?)] of its operands (exact NumPy masks)."""
    out = []
    for ins in program.instructions:
        accesses = []
        for name, a in ins.operands.items():
            b = program.buffers[a.buffer]
            mask = np.zeros(b.shape, bool)
            mask[() if a.index is None else a.index] = True
            writes = name in WRITES
            accesses.append((a.buffer, mask, writes))
            if name == "dst" and ins.opcode == "nc_matmul":
                accesses.append((a.buffer, mask, False))        # an accumulating matmul reads its dst
        out.append(accesses)
    return out


def assert_keeps_every_dependency(program, scheduled):
    """Two accesses to overlapping elements of one buffer, one of them a write, stay in program
    order; two tiles sharing bytes are never live at once (their instructions do not interleave)."""
    position = {id(ins): k for k, ins in enumerate(scheduled.instructions)}
    new = [position[id(ins)] for ins in program.instructions]
    assert sorted(new) == list(range(len(program)))
    masks = _masks(program)
    for i in range(len(program)):
        for j in range(i + 1, len(program)):
            conflict = any(bi == bj and (wi or wj) and (mi & mj).any()
                           for bi, mi, wi in masks[i] for bj, mj, wj in masks[j])
            if conflict:
                assert new[i] < new[j], (f"instructions {i} and {j} touch the same elements and were swapped:\n"
                                         f"{program.format_instruction(i)}\n{program.format_instruction(j)}")
    for a in scheduled.buffers:                                  # same address, and apart in time
        assert a.offset == program.buffers[a.id].offset
    instruction_order.check_disjoint(scheduled)


# -- random small kernels -----------------------------------------------------------------------------
ENGINES = (nisa.engine.vector, nisa.engine.scalar, nisa.engine.gpsimd)


def random_kernel(steps, n_sbuf: int, n_psum: int, columns: int):
    """A kernel over `n_sbuf` SBUF tiles [128, F] and `n_psum` PSUM tiles [64, F], each written
    first, then `steps` (loads, element-wise ops on several engines, half-tile copies, matmul
    groups, PSUM copies, stores), then every SBUF tile stored: every value shows in the output."""
    stores = [k for k, step in enumerate(steps) if step[0] == "store"]
    width = len(stores) + n_sbuf          # output column blocks: one per store, then one per tile

    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, width * F), dtype=nl.float32, buffer=nl.shared_hbm)
        sb = [nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf) for _ in range(n_sbuf)]
        ps = [nl.ndarray((64, F), dtype=nl.float32, buffer=nl.psum) for _ in range(n_psum)]
        for s, t in enumerate(sb):
            nisa.dma_copy(dst=t, src=a[:, (s % columns) * F:(s % columns + 1) * F])
        for p in ps:
            nisa.memset(dst=p, value=0.0)
        for k, (kind, x, y, z, e) in enumerate(steps):
            x, y, z = x % n_sbuf, y % n_sbuf, z % n_sbuf
            if kind == "load":
                nisa.dma_copy(dst=sb[x], src=a[:, (y % columns) * F:(y % columns + 1) * F])
            elif kind == "add":
                nisa.tensor_tensor(dst=sb[x], data1=sb[y], data2=sb[z], op=nl.add,
                                   engine=ENGINES[e % 2 * 2])       # vector or gpsimd
            elif kind == "copy":
                nisa.tensor_copy(dst=sb[x], src=sb[y], engine=ENGINES[e % 3])
            elif kind == "half":
                nisa.tensor_copy(dst=sb[x][:, 0:F // 2], src=sb[y][:, F // 2:F], engine=ENGINES[e % 3])
            elif kind == "memset":
                nisa.memset(dst=sb[x], value=float(e), engine=ENGINES[e % 3])
            elif kind == "matmul":           # a group of 1-3 accumulating matmuls into one PSUM tile
                p = ps[e % n_psum]
                for g in range(e % 3 + 1):
                    nisa.nc_matmul(dst=p, stationary=sb[(x + g) % n_sbuf][:, 0:64], moving=sb[y],
                                   accumulate=bool(g) or bool(z % 2))
            elif kind == "drain":
                nisa.tensor_copy(dst=sb[x][0:64, :], src=ps[e % n_psum], engine=ENGINES[e % 2])
            elif kind == "store":
                c = stores.index(k)
                nisa.dma_copy(dst=out[:, c * F:(c + 1) * F], src=sb[x])
        for s, t in enumerate(sb):
            c = len(stores) + s
            nisa.dma_copy(dst=out[:, c * F:(c + 1) * F], src=t)
        return out
    return kernel


STEP = st.tuples(st.sampled_from(["load", "add", "copy", "half", "memset", "matmul", "drain", "store"]),
                 st.integers(0, 7), st.integers(0, 7), st.integers(0, 7), st.integers(0, 5))


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=40), n_sbuf=st.integers(2, 5), n_psum=st.integers(1, 3),
       target=st.sampled_from(["trn1", "trn2", "trn3"]))
def test_a_list_schedule_keeps_every_dependency_and_the_values(steps, n_sbuf, n_psum, target):
    columns = 3
    # small integers: every sum is exact in fp32, so any reordering of a sum would not hide here —
    # the values must be identical, bit for bit
    a = np.random.default_rng(len(steps)).integers(-2, 3, (128, columns * F)).astype(np.float32)
    kernel = random_kernel(steps, n_sbuf, n_psum, columns)
    program = nki.trace(kernel, a, target=target)
    listed = instruction_order.list_schedule(program)
    assert listed.schedule == "list"
    assert_keeps_every_dependency(program, listed)
    ordered = Device(target, cores=1).run(program, a)
    reordered = Device(target, cores=1).run(listed, a)
    np.testing.assert_array_equal(reordered.outputs, ordered.outputs)


# -- independent iterations overlap -----------------------------------------------------------------
@nki.jit
def key_tile_chain(q, k):
    """Per key tile, a chain over four engines like AWS's SD attention: memset a PSUM tile (Vector),
    QK^T into it (Tensor), copy it to SBUF (Scalar), reduce it (Vector). The iterations are
    independent; in program order the Vector queue holds each memset behind the previous reduce."""
    d, s = q.shape                                                    # q, k: [d=128, s]
    tiles = s // 512
    out = nl.ndarray((128, tiles), dtype=nl.float32, buffer=nl.shared_hbm)
    q_sb = nl.load(q[:, 0:128])                                       # [d, 128 queries]
    k_sb = nl.load(k)                                                 # [d, s keys]: loaded once
    maxes = nl.ndarray((128, tiles), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(tiles):
        scores = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
        scores += nisa.nc_matmul(stationary=q_sb, moving=k_sb[:, j * 512:(j + 1) * 512])  # [128, 512]
        s_sb = nl.copy(scores, dtype=nl.float32)                      # Scalar engine: PSUM -> SBUF
        maxes[:, j:j + 1] = nisa.tensor_reduce(op=nl.maximum, data=s_sb, axis=(1,))
    nl.store(out, maxes)
    return out


def test_a_list_schedule_overlaps_independent_iterations_and_finishes_sooner():
    q, k = SD((128, 4096), "bfloat16"), SD((128, 4096), "bfloat16")
    program = nki.trace(key_tile_chain, q, k)
    listed = instruction_order.list_schedule(program)
    ordered = Device("trn2", mode="timing", cores=1).run(program, None, None)
    reordered = Device("trn2", mode="timing", cores=1).run(listed, None, None)
    assert reordered.latency_us < 0.8 * ordered.latency_us
    # what moved: on the Vector engine, the memsets of later tiles run ahead of the reduces
    vector = [ins.opcode for ins in listed.instructions if ins.engine == "dve"]
    assert vector[:2] == ["memset", "memset"]
    assert [ins.opcode for ins in program.instructions if ins.engine == "dve"][:2] != ["memset", "memset"]


def test_the_list_schedule_gives_the_same_values_as_program_order_on_a_chain_of_engines():
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((128, 1024)).astype(np.float32) for _ in range(2))
    program = nki.trace(key_tile_chain, q, k)
    listed = instruction_order.list_schedule(program)
    a = Device("trn2", cores=1).run(program, q, k).outputs
    b = Device("trn2", cores=1).run(listed, q, k).outputs
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(b, (q[:, :128].T @ k).reshape(128, 2, 512).max(axis=2), rtol=1e-5)


@pytest.mark.parametrize("kernel", ladder.LADDER[1:], ids=lambda k: k.__name__)
def test_the_list_schedule_finishes_no_later_than_program_order_on_the_matmul_ladder(kernel):
    K, M, N = 1024, 2048, 2048
    spec = presets.TRN2.core
    if kernel is ladder.matmul_block_free:
        spec = ladder.roomy_trn2(max(spec.sbuf_partition_bytes, ladder.block_free_sbuf_bytes(K)))
    program = nki.trace(kernel, SD((K, M), "float32"), SD((K, N), "float32"), target=spec)
    listed = instruction_order.list_schedule(program)
    ordered = Device(spec, mode="timing", cores=1).run(program, None, None).latency_us
    reordered = Device(spec, mode="timing", cores=1).run(listed, None, None).latency_us
    assert reordered <= ordered * (1 + 1e-9)


# -- memory -------------------------------------------------------------------------------------------
def test_the_list_schedule_keeps_the_allocation_where_hoisting_loads_overflows():
    # the fully blocked ladder step fills SBUF: hoisting its loads does not fit, the list schedule
    # keeps every tile at its address and its live range apart from the tiles sharing its bytes
    K, M, N = 4096, 4096, 2048
    program = nki.trace(ladder.matmul_fully_blocked, SD((K, M), "float32"), SD((K, N), "float32"))
    with pytest.raises(Exception, match="SBUF overflow"):
        instruction_order.hoist_loads(program)
    listed = instruction_order.list_schedule(program)
    assert listed.allocated and listed.peak_bytes("sbuf") == program.peak_bytes("sbuf")
    instruction_order.check_disjoint(listed)


def test_keeping_offsets_refuses_an_order_where_tiles_sharing_bytes_are_live_together():
    @nki.jit
    def two_in_a_row(a):
        out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
        for j in nl.affine_range(2):
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
            nisa.dma_copy(dst=t, src=a[:, j * 512:(j + 1) * 512])
            nisa.dma_copy(dst=out[:, j * 512:(j + 1) * 512], src=t)
        return out
    program = nki.trace(two_in_a_row, SD((128, 1024), "float32"))
    assert [i.opcode for i in program.instructions] == ["dma_copy"] * 4
    # both loads before both stores: the second load overwrites the first tile's bytes while live
    with pytest.raises(ValueError, match="share bytes while both are live"):
        instruction_order.reorder(program, [0, 2, 1, 3], "bad", keep_offsets=True)
    assert list_order(program) == [0, 1, 2, 3]           # the list schedule keeps them apart
    with pytest.raises(ValueError, match="every instruction exactly once"):
        instruction_order.reorder(program, [0, 1, 1, 3], "bad")


# -- which kernels keep program order -----------------------------------------------------------------
def test_a_kernel_asking_to_skip_middle_end_transformations_keeps_program_order(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", None)            # the default: the list schedule
    plain = nki.jit(key_tile_chain.func)
    kept = nki.jit(ncc.skip_middle_end_transformations(lambda q, k: key_tile_chain.func(q, k)))
    args = SD((128, 1024), "bfloat16"), SD((128, 1024), "bfloat16")
    assert nki.trace(plain, *args).schedule == "list"
    assert nki.trace(kept, *args).schedule == "program"


def test_a_kernel_with_a_no_reorder_loop_keeps_program_order(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", None)

    @nki.jit
    def ordered_loop(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for j in nl.sequential_range(2, directives=ncc.no_reorder()):
            nl.store(out[:, j * 128:(j + 1) * 128], nl.exp(nl.load(a[:, j * 128:(j + 1) * 128])))
        return out
    assert nki.trace(ordered_loop, SD((128, 256), "float32")).schedule == "program"


def test_scheduled_names_the_schedules_it_knows():
    program = nki.trace(key_tile_chain, SD((128, 256), "bfloat16"), SD((128, 256), "bfloat16"))
    assert instruction_order.scheduled(program, "program") is program
    assert instruction_order.scheduled(program, "list").schedule == "list"
    with pytest.raises(ValueError, match="unknown schedule 'fastest'"):
        instruction_order.scheduled(program, "fastest")


def test_the_default_is_the_list_schedule_up_to_a_size_then_program_order(monkeypatch):
    monkeypatch.setattr(nki, "SCHEDULE", None)
    args = SD((128, 1024), "bfloat16"), SD((128, 1024), "bfloat16")
    assert nki.trace(key_tile_chain, *args).schedule == instruction_order.DEFAULT == "list"
    monkeypatch.setattr(instruction_order, "LIST_LIMIT", 10)          # a program above the limit keeps its order
    small = nki.jit(lambda q, k: key_tile_chain.func(q, k))
    assert nki.trace(small, *args).schedule == "program"
    monkeypatch.setattr(nki, "SCHEDULE", "list")             # unless the list schedule is asked for
    assert nki.trace(small, *args).schedule == "list"


def test_regions_keep_their_order_and_reorder_within():
    @nki.jit
    def two_regions(q, k):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        for r in range(2):
            with nki.region(f"part{r}"):
                part = key_tile_chain.func(q, k)                 # a chain of 2 key tiles each
                nisa.dma_copy(dst=out[:, 2 * r:2 * r + 2], src=part)
        return out
    program = nki.trace(two_regions, SD((128, 1024), "bfloat16"), SD((128, 1024), "bfloat16"))
    listed = instruction_order.list_schedule(program)
    regions = [ins.region.split("/")[0] for ins in listed.instructions]
    assert regions == sorted(regions) and len(set(regions)) == 2           # part0 entirely first
    assert [i.opcode for i in listed.instructions] != [i.opcode for i in program.instructions]


def test_a_kernel_called_from_a_kernel_interleaves_with_its_caller():
    @nki.jit
    def caller(q, k):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        for r in range(2):
            part = key_tile_chain(q, k)                        # inlined: region "key_tile_chain"
            nisa.dma_copy(dst=out[:, 2 * r:2 * r + 2], src=part)
        return out
    program = nki.trace(caller, SD((128, 1024), "bfloat16"), SD((128, 1024), "bfloat16"))
    assert {ins.region for ins in program.instructions} == {"", "key_tile_chain"}
    listed = instruction_order.list_schedule(program)
    # the second call's memsets run ahead of the first call's store: no barrier between the calls
    store = next(k for k, ins in enumerate(listed.instructions) if ins.region == "" and ins.opcode == "dma_copy")
    memsets = [k for k, ins in enumerate(listed.instructions) if ins.opcode == "memset"]
    assert len(memsets) == 4 and memsets[-1] < store


def test_a_program_with_a_collective_keeps_program_order():
    from trnlab.hardware.records import ISSUE
    from trnlab.hardware.program import Program
    traced = nki.trace(key_tile_chain, SD((128, 1024), "bfloat16"), SD((128, 1024), "bfloat16"))
    assert list_order(traced) != list(range(len(traced)))
    program = Program.loads(traced.dumps())                  # a copy with instructions of its own
    program.issue_spec = program.spec = traced.issue_spec
    for mine, theirs in zip(program.instructions, traced.instructions):
        mine.issue = theirs.issue
    # an instruction the cluster times (no duration of its own), as a collective's description is
    k = next(k for k, ins in enumerate(program.instructions) if ins.opcode == "tensor_reduce")
    d = program.instructions[k].issue
    program.instructions[k].issue = (ISSUE, d[1], d[2], 0.0) + d[4:11]
    assert list_order(program) == list(range(len(program)))


def test_the_random_stream_keeps_its_order_and_the_values():
    @nki.jit
    def seeded_dropouts(a):
        out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
        for j in nl.affine_range(4):                       # independent tiles, one random stream
            if j == 2:
                nl.random_seed(7)
            t = nl.load(a[:, j * 256:(j + 1) * 256])
            nl.store(out[:, j * 256:(j + 1) * 256], nl.dropout(nl.exp(t), 0.5))
        return out
    a = np.random.default_rng(0).standard_normal((128, 1024)).astype(np.float32)
    program = nki.trace(seeded_dropouts, a)
    listed = instruction_order.list_schedule(program)
    stream = [ins for ins in program.instructions if ins.opcode in ("set_rng_seed", "dropout")]
    assert len(stream) == 5
    assert [ins for ins in listed.instructions if ins.opcode in ("set_rng_seed", "dropout")] == stream
    np.testing.assert_array_equal(Device("trn2", cores=1).run(listed, a).outputs,
                                  Device("trn2", cores=1).run(program, a).outputs)


def test_a_program_that_prints_keeps_program_order():
    @nki.jit
    def printing(q, k):
        t = nl.load(q[:, 0:128])
        nl.device_print("q tile", t)
        return key_tile_chain.func(q, k)
    program = nki.trace(printing, SD((128, 1024), "bfloat16"), SD((128, 1024), "bfloat16"))
    assert list_order(program) == list(range(len(program)))


def test_zeroing_memsets_of_psum_tiles_a_matmul_overwrites_can_be_dropped(monkeypatch):
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((128, 1024)).astype(np.float32) for _ in range(2))
    program = nki.trace(key_tile_chain, q, k)
    memsets = [j for j, ins in enumerate(program.instructions) if ins.opcode == "memset"]
    assert instruction_order.zeroing_memsets(program) == memsets                   # each nl.zeros PSUM tile
    lean = instruction_order.drop_zeroing_memsets(program)
    assert len(lean) == len(program) - 2 and lean.opcode_counts()["memset"] == 0
    np.testing.assert_array_equal(Device("trn2", cores=1).run(lean, q, k).outputs,
                                  Device("trn2", cores=1).run(program, q, k).outputs)
    monkeypatch.setattr(nki, "DROP_PSUM_ZEROING", True)
    assert nki.trace(key_tile_chain, q, k).opcode_counts()["memset"] == 0


def test_a_memset_whose_zeros_are_read_is_kept():
    @nki.jit
    def reads_the_zeros(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
        t = nl.load(a)
        acc[...] = nl.add(acc, 1.0)                                      # reads the zeros first
        acc += nisa.nc_matmul(stationary=t[:, 0:128], moving=t)
        nl.store(out, nl.copy(acc))
        return out
    program = nki.trace(reads_the_zeros, SD((128, 512), "float32"))
    assert program.opcode_counts()["memset"] == 1 and instruction_order.zeroing_memsets(program) == []
