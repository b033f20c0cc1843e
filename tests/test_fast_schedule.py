"""The list schedule's fast paths (hardware/fast/resolve.py, hardware/fast/list_schedule.py) give
the reference's resolved program, previous owners, order, buffer table and timeline exactly, on
kernels shaped like AWS's tiled matmul tutorial (tiles taking fresh SBUF bytes that wrap around),
on loops whose iterations differ and wrap SBUF, and on the library's kernels (Vector / Scalar /
GpSimd work, transposes, PSUM groups, merged records)."""
import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import instruction_order, list_schedule, presets, replay_timing
from trnlab.hardware.device import Device
from trnlab.hardware.fast import list_schedule as fast_list_schedule
from trnlab.hardware.fast import resolve as fast_resolve
from trnlab.kernels import KERNELS
from trnlab.kernels.workload import gpt_arguments
from test_schedule_list import F, STEP, key_tile_chain, random_kernel      # (the list schedule's own cases)

SD = nki.ShapeDtype


@pytest.fixture(autouse=True)
def program_order_traces(monkeypatch):
    """nki.trace gives program order here: each test schedules it itself."""
    monkeypatch.setattr(nki, "SCHEDULE", "program")


@nki.jit
def tiled_matmul(lhsT, rhs):
    """AWS's tutorial shape of a tiled matmul: fresh SBUF tiles for every K step, one PSUM tile per
    output tile, the result copied out through SBUF."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            res_psum = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lhsT_tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                nisa.dma_copy(dst=rhs_tile, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(dst=res_psum, stationary=lhsT_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum, dtype=result.dtype)
            nisa.dma_copy(dst=result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=res_sb)
    return result


# (K, M, N): the list schedule reorders all but the first; the last three take more bytes than SBUF's
# rotation holds, so tiles reuse freed bytes (as at 4096³); the last writes 64 output tiles, so the
# output's write records are merged (dependencies.MAX_RECORDS) while its iterations are resolved
MATMUL_SHAPES = [(256, 128, 512), (4096, 128, 512), (1024, 1024, 1024), (2048, 1024, 1024), (512, 1024, 4096)]

# tile widths (fp32 elements) the iterations of `uneven_tiles` cycle through
WIDTHS = (512, 1536, 1024, 128, 2048)


@nki.jit
def uneven_tiles(a):
    """Loop iterations that differ: each takes tiles of another width (so it is traced, not stamped),
    and their bytes wrap around SBUF several times — a new tile takes over parts of several freed
    tiles of other widths (several inherited ranges, cut at both ends; "latest of" groups)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    offset = 0
    for j in range(a.shape[1] // sum(WIDTHS) * len(WIDTHS)):
        w = WIDTHS[j % len(WIDTHS)]
        t = nl.ndarray((128, w), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[:, offset:offset + w])
        u = nl.ndarray((128, w), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=u, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[:, offset:offset + w], src=u)
        offset += w
    return out


@nki.jit
def held_stationary(lhsT, rhs):
    """Several loop iterations reuse one stationary tile (the stationary chain across iterations)
    while each takes fresh moving tiles that wrap around SBUF."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        lhsT_tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhsT_tile, src=lhsT[0:128, m * 128:(m + 1) * 128])
        for n in nl.affine_range(N // 512):
            res_psum = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            rhs_tile = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=rhs_tile, src=rhs[0:128, n * 512:(n + 1) * 512])
            nisa.nc_matmul(dst=res_psum, stationary=lhsT_tile, moving=rhs_tile)
            res_sb = nl.ndarray(res_psum.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res_sb, src=res_psum, dtype=result.dtype)
            nisa.dma_copy(dst=result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=res_sb)
    return result


def _programs():
    """(name, program-order program, target) of the cases compared."""
    saved, nki.SCHEDULE = nki.SCHEDULE, "program"
    try:
        return _traced()
    finally:
        nki.SCHEDULE = saved


def _traced():
    out = []
    for k, m, n in MATMUL_SHAPES:
        for target in ("trn2", "trn1"):
            out.append((f"tiled {k}x{m}x{n} {target}",
                        nki.trace(tiled_matmul, SD((k, m), "bfloat16"), SD((k, n), "bfloat16"), target=target),
                        target))
    out.append(("uneven tiles wrapping SBUF trn2",
                nki.trace(uneven_tiles, SD((128, 12 * sum(WIDTHS)), "float32"), target="trn2"), "trn2"))
    out.append(("held stationary trn2",
                nki.trace(held_stationary, SD((128, 1024), "bfloat16"), SD((128, 16384), "bfloat16"),
                          target="trn2"), "trn2"))
    args = gpt_arguments(batch=2, seq=128, d_model=128, n_head=4, vocab=64)
    for name, (kernel, _) in KERNELS.items():
        out.append((name, nki.trace(kernel, *args[name], target="trn2"), "trn2"))
    return out


PROGRAMS = _programs()


def _copy(program):
    """A copy that shares nothing the schedule changes (buffer rows, derived caches)."""
    new = copy.copy(program)
    new.__dict__.pop("_derived", None)
    new.buffers = [copy.copy(b) for b in program.buffers]
    new.instructions = list(program.instructions)
    return new


def _records(timeline) -> list:
    return [(r.engine, r.opcode, r.start_ns, r.end_ns, r.ready_ns, r.flops, r.hbm_bytes, r.sbuf_bytes,
             r.psum_bytes, r.waited_for) for r in (timeline[i] for i in range(len(timeline)))]


def test_the_inlined_resolve_numbers_every_node_as_the_reference_does():
    assert fast_resolve.GROUP_MAX == replay_timing.GROUP_MAX
    for name, program, target in PROGRAMS:
        spec = presets.core_spec(target)
        compiled = replay_timing.compiled_for(program, spec)
        static = replay_timing._static(program, compiled.written)
        layouts = [list_schedule._FRESH, {"sbuf": ((0, 4096), (8192, 9000)), "psum": ((0, 2048),)}]
        for layout in layouts:
            reference = replay_timing._resolve(program, compiled.issues, spec, layout, static)
            fast = fast_resolve.resolve(program, compiled.issues, spec, layout, static)
            for field in replay_timing.Resolved.__slots__:
                assert getattr(fast, field) == getattr(reference, field), (name, field)


def test_the_fast_previous_owners_are_the_reference_tiles_whose_bytes_each_tile_takes_over():
    for name, program, _ in PROGRAMS:
        sizes = list_schedule.tile_bytes(program)
        fast = fast_list_schedule.previous_owners(program, sizes)
        assert fast == list_schedule._previous_owners(program, sizes), name
        if name.startswith(("tiled 2048", "uneven")):         # the rotation wraps: owners exist
            assert len(fast) > 50, name


@pytest.mark.parametrize("case", range(len(PROGRAMS)), ids=[p[0] for p in PROGRAMS])
def test_the_fast_list_schedule_gives_the_reference_program_and_timeline(case):
    name, program, target = PROGRAMS[case]
    with config.override(fast=False):
        reference = instruction_order.list_schedule(_copy(program))
    fast = instruction_order.list_schedule(_copy(program))
    assert [id(i) for i in fast.instructions] == [id(i) for i in reference.instructions]
    if name.startswith("tiled") and not name.startswith("tiled 256"):       # the case is a reordering
        assert sum(a is not b for a, b in zip(fast.instructions, program.instructions)) > len(program) // 2
    assert [(b.id, b.first, b.last, b.offset) for b in fast.buffers] == \
        [(b.id, b.first, b.last, b.offset) for b in reference.buffers]
    assert fast.schedule == reference.schedule and fast.allocated and reference.allocated
    spec = presets.core_spec(target)
    fast_compiled, reference_compiled = (replay_timing.compiled_for(p, spec) for p in (fast, reference))
    assert fast_compiled.issues == reference_compiled.issues
    assert sorted(vars(fast_compiled)) == sorted(vars(reference_compiled))      # (taken over, not built)
    for field in ("positive", "written", "matmul_dtypes"):
        assert getattr(fast_compiled, field) == getattr(reference_compiled, field), field
    timelines = []
    for scheduled, fast_switch in ((fast, True), (reference, False)):
        with config.override(fast=fast_switch):
            run = Device(target, mode="timing", cores=1).run(scheduled, *[None] * len(scheduled.inputs))
            timelines.append(_records(run.timeline))
    assert timelines[0] == timelines[1]
    instruction_order.check_disjoint(fast)


def _assert_same_schedule(program, target="trn2"):
    """The fast list schedule of `program` is the reference's: order, buffer table, descriptions."""
    with config.override(fast=False):
        reference = instruction_order.list_schedule(_copy(program))
    fast = instruction_order.list_schedule(_copy(program))
    assert [id(i) for i in fast.instructions] == [id(i) for i in reference.instructions]
    assert [(b.first, b.last, b.offset) for b in fast.buffers] == \
        [(b.first, b.last, b.offset) for b in reference.buffers]
    spec = presets.core_spec(target)
    assert replay_timing.compiled_for(fast, spec).issues == replay_timing.compiled_for(reference, spec).issues
    return fast


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=40), n_sbuf=st.integers(2, 5), n_psum=st.integers(1, 3),
       target=st.sampled_from(["trn1", "trn2", "trn3"]))
def test_the_fast_list_schedule_is_the_reference_on_random_kernels(steps, n_sbuf, n_psum, target):
    kernel = random_kernel(steps, n_sbuf, n_psum, 3)
    program = nki.trace(kernel, SD((128, 3 * F), "float32"), target=target)
    _assert_same_schedule(program, target)


def test_the_fast_list_schedule_is_the_reference_across_regions_calls_the_random_stream_and_aliases():
    @nki.jit
    def two_regions(q, k):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        for r in range(2):
            with nki.region(f"part{r}"):
                part = key_tile_chain.func(q, k)
                nisa.dma_copy(dst=out[:, 2 * r:2 * r + 2], src=part)
        return out

    @nki.jit
    def caller(q, k):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        for r in range(2):
            part = key_tile_chain(q, k)                        # inlined into the caller's region
            nisa.dma_copy(dst=out[:, 2 * r:2 * r + 2], src=part)
        return out

    @nki.jit
    def seeded_dropouts(a):
        out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
        for j in nl.affine_range(4):
            if j == 2:
                nl.random_seed(7)
            t = nl.load(a[:, j * 256:(j + 1) * 256])
            nl.store(out[:, j * 256:(j + 1) * 256], nl.dropout(nl.exp(t), 0.5))
        return out
    @nki.jit
    def through_a_reshape(a):                  # an HBM alias: its accesses keep their order
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        flat = out.reshape((256, 256))
        for j in nl.affine_range(4):
            t = nl.load(a[:, j * 128:(j + 1) * 128])
            nl.store(out[:, j * 128:(j + 1) * 128], nl.exp(t))
        u = nl.load(flat[0:128, 0:256])
        nl.store(out[:, 0:256], nl.add(u, u))
        return out
    q = k = SD((128, 1024), "bfloat16")
    for kernel, args in ((two_regions, (q, k)), (caller, (q, k)), (key_tile_chain, (q, k)),
                         (seeded_dropouts, (SD((128, 1024), "float32"),)),
                         (through_a_reshape, (SD((128, 512), "float32"),))):
        program = nki.trace(kernel, *args, target="trn2")
        assert _assert_same_schedule(program).instructions != program.instructions, kernel
