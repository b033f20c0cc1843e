"""Loop tracing (trnlab/nki/loops.py): a kernel whose nl.affine_range / nl.sequential_range loops
are traced in iterations 0, 1 and n-1 and stamped out in between gives the same program, record
for record, as tracing every iteration, and the same timeline on replay; a loop that uses its
iterator in any other way than affinely falls back to the concrete trace and is still right."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware.device import Device
from trnlab.nki import loops
from trnlab.nki.loop_index import LoopIndex, Retrace, plain

SD = nki.ShapeDtype

# loop stamping reads CPython 3.11 bytecode; on any other Python every loop is traced concretely
needs_stamping = pytest.mark.skipif(sys.version_info[:2] != loops.STAMPING_PYTHON,
                                    reason="loop stamping runs on CPython 3.11 only (nki/loops.py)")



def _trace(kernel, *args, stamp: bool | None, target="trn2", grid=None, **kwargs):
    nki._PROGRAMS.clear()
    try:
        with config.override(**({} if stamp is None else {"fast": stamp})):    # None: the switches as set
            return nki.trace(kernel, *args, target=target, grid=grid, **kwargs)
    finally:
        nki._PROGRAMS.clear()


def _timeline(program, target="trn2"):
    run = Device(target, mode="timing", cores=1).run(program, *([None] * len(program.inputs)))
    return [tuple(r) for r in run.core.timeline.records], run.latency_ns


def _stamped_loops(kernel, *args, stamp: bool | None = True, **kwargs) -> int:
    """How many loop executions stamped iterations while tracing (0: everything concrete)."""
    count = [0]
    original = loops.Loop.after_second

    def counting(self):
        original(self)
        count[0] += 1
    loops.Loop.after_second = counting
    try:
        _trace(kernel, *args, stamp=stamp, **kwargs)
    finally:
        loops.Loop.after_second = original
    return count[0]


def assert_same_program(kernel, *args, target="trn2", grid=None, replay=True, **kwargs):
    stamped = _trace(kernel, *args, stamp=True, target=target, grid=grid, **kwargs)
    fallbacks = list(loops.fallbacks)
    concrete = _trace(kernel, *args, stamp=False, target=target, grid=grid, **kwargs)
    assert loops.first_difference(stamped, concrete) == ""
    assert [b.offset for b in stamped.buffers] == [b.offset for b in concrete.buffers]   # allocation
    assert stamped.listing(limit=50) == concrete.listing(limit=50)
    if replay:
        assert _timeline(stamped, target) == _timeline(concrete, target)
    return stamped, fallbacks


# -- every kernel of the library, at shapes whose loops have at least 4 iterations -----------------
def _kernel_cases():
    from trnlab.kernels import activations, adamw, attention, cross_entropy, decode_attention, elementwise
    from trnlab.kernels import embedding, fused, matmul, matmul_ladder, norms, shape_ops, softmax
    f32, bf16 = "float32", "bfloat16"
    x = SD((640, 256), f32)
    cases = [
        ("ladder tiled", matmul_ladder.matmul_tiled, (SD((512, 512), bf16), SD((512, 2048), bf16)), {}),
        ("ladder hoisted", matmul_ladder.matmul_hoisted, (SD((512, 512), bf16), SD((512, 2048), bf16)), {}),
        ("ladder block free", matmul_ladder.matmul_block_free, (SD((512, 1024), f32), SD((512, 2048), f32)), {}),
        ("ladder fully blocked", matmul_ladder.matmul_fully_blocked,
         (SD((2048, 2048), f32), SD((2048, 2048), f32)), {}),
        ("matmul", matmul.matmul, (SD((512, 640), f32), SD((640, 2048), f32)), {}),
        ("matmul lhsT", matmul.matmul_lhsT, (SD((640, 512), f32), SD((640, 2048), f32)), {}),
        ("attention", attention.causal_attention, tuple(SD((1, 2, 512, 32), bf16) for _ in range(3)), {}),
        ("attention backward", attention.causal_attention_backward,
         tuple(SD((1, 2, 512, 32), bf16) for _ in range(5)) + (SD((1, 2, 512), f32),), {}),
        ("softmax", softmax.softmax, (x,), {}),
        ("softmax backward", softmax.softmax_backward, (x, x), {}),
        ("layer norm", norms.layer_norm, (x, SD((256,), f32), SD((256,), f32)), {}),
        ("layer norm backward", norms.layer_norm_backward, (x, SD((256,), f32), x), {}),
        ("rms norm", norms.rms_norm, (x, SD((256,), f32)), {}),
        ("adamw", adamw.adamw, (x, x, x, x, SD((3,), f32)), {}),
        ("squared norm", adamw.squared_norm, (x,), {}),
        ("fused layer_norm_linear", fused.layer_norm_linear,
         (SD((512, 256), f32), SD((256,), f32), SD((256,), f32), SD((256, 1024), f32)), {}),
        ("decode attention", decode_attention.decode_attention,
         (SD((2, 384), f32), SD((2, 256, 128), f32), SD((2, 256, 128), f32), SD((2, 256), f32), 4), {}),
        ("gelu", activations.gelu, (x,), {}),
        ("cross entropy", cross_entropy.cross_entropy, (SD((512, 640), f32), SD((512,), "int32")), {}),
        ("embedding", embedding.embedding, (SD((512,), "int32"), SD((640, 64), f32)), {}),
        ("add", elementwise.add, (x, x), {}),
        ("transpose 2d", shape_ops.transpose_2d, (SD((512, 640), f32),), {}),
        ("row sum", shape_ops.row_sum, (x,), {}),
    ]
    return cases


@pytest.mark.parametrize("name, kernel, args, kwargs", _kernel_cases(), ids=[c[0] for c in _kernel_cases()])
def test_every_library_kernel_traces_to_the_same_program_and_timeline_with_stamped_loops(name, kernel, args,
                                                                                        kwargs):
    assert_same_program(kernel, *args, **kwargs)


@needs_stamping
def test_the_tiled_matmul_stamps_all_three_loops_without_falling_back():
    from trnlab.kernels import matmul_ladder
    args = (SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"))
    _, fallbacks = assert_same_program(matmul_ladder.matmul_tiled, *args)
    assert fallbacks == []
    # m: one execution; n: in m's iterations 0, 1, 3; k: in n's iterations 0, 1, 3 of each
    assert _stamped_loops(matmul_ladder.matmul_tiled, *args) == 1 + 3 + 9


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_stamped_programs_agree_on_other_targets(target):
    from trnlab.kernels import attention, matmul_ladder
    assert_same_program(matmul_ladder.matmul_tiled, SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"),
                        target=target)
    assert_same_program(attention.causal_attention, *(SD((1, 1, 512, 64), "float32") for _ in range(3)),
                        target=target)


# -- the kernels of tests/nki_kernels (AWS-style kernels) -----------------------------------------
def test_the_nki_test_kernels_give_the_same_programs():
    from tests.nki_kernels import attention, norms, scan, tensor_add
    assert_same_program(tensor_add.add_tiled, SD((512, 2048), "float32"), SD((512, 2048), "float32"))
    assert_same_program(norms.softmax_rows, SD((640, 256), "float32"))
    assert_same_program(norms.rmsnorm_rows, SD((640, 256), "float32"), SD((1, 256), "float32"))
    assert_same_program(scan.linear_scan_destination, SD((128, 2048), "float32"), SD((128, 2048), "float32"))
    assert_same_program(attention.attention_fwd, SD((64, 512), "float32"), SD((64, 512), "float32"),
                        SD((512, 64), "float32"))


# -- property: random tile counts and shapes --------------------------------------------------------
@nki.jit
def _tiled_add_scale(a, b, scale):
    """out = (a + b) * scale per [128, F] tile, with a second, sequential loop over column blocks."""
    R, C = a.shape
    F = C // 4
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // 128):
        for c in nl.sequential_range(4):
            x = nl.load(a[r * 128:(r + 1) * 128, c * F:(c + 1) * F])
            y = nl.load(b[nl.ds(r * 128, 128), nl.ds(c * F, F)])
            nl.store(out[r * 128:(r + 1) * 128, c * F:(c + 1) * F], value=nl.multiply(nl.add(x, y), scale))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 7), n=st.integers(1, 7), k=st.integers(1, 7), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_property_stamped_matmul_equals_the_concrete_trace_for_any_tile_counts(m, n, k, dtype):
    from trnlab.kernels import matmul_ladder
    assert_same_program(matmul_ladder.matmul_tiled, SD((128 * k, 128 * m), dtype), SD((128 * k, 512 * n), dtype),
                        replay=m * n * k < 60)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 9), width=st.sampled_from([64, 256, 1024]), scale=st.floats(0.5, 4.0))
def test_property_elementwise_loops_with_nl_ds_and_a_sequential_loop(rows, width, scale):
    assert_same_program(_tiled_add_scale, SD((128 * rows, width), "float32"), SD((128 * rows, width), "float32"),
                        scale)


# -- the iterator: affine arithmetic stays symbolic, anything else taints ---------------------------
class _FakeLoop:
    site = ("here", 1)

    def __init__(self, stamped=False):
        self.active, self.stamped, self.degraded = True, stamped, None
        self.values, self.current = range(8), 3            # k = 3 in a loop over 0..7

        class tracer:
            poisoned, abandoned = False, []
        self.tracer = tracer

    def degrade(self, reason):
        self.degraded = reason


def test_a_loop_index_stays_a_loop_index_under_affine_arithmetic():
    loop = _FakeLoop()
    k = LoopIndex(3, ((loop, 1),))
    e = (k + 1) * 128 - 64 + 2 * k
    assert type(e) is LoopIndex and plain(e) == (3 + 1) * 128 - 64 + 6
    assert e._terms == ((loop, 130),)
    assert type((k + 1) - k) is int and plain(-k) == -3
    assert loop.degraded is None                              # nothing above left the affine world


_USES = {"bool": lambda k: bool(k), "eq": lambda k: k == 3, "lt": lambda k: k < 4, "hash": lambda k: hash(k),
         "list index": lambda k: [1, 2, 3, 4][k], "range": lambda k: list(range(k)), "floordiv": lambda k: k // 2,
         "mod": lambda k: k % 2, "min": lambda k: min(k, 2), "int": lambda k: int(k), "float": lambda k: float(k),
         "str": lambda k: str(k), "format": lambda k: f"t{k:02d}", "float mul": lambda k: 0.5 * k,
         "square": lambda k: k * k, "dict key": lambda k: {k: 1}[3], "numpy": lambda k: np.arange(6)[k],
         "abs": lambda k: abs(-k), "isinstance": lambda k: isinstance(k, int)}


@pytest.mark.parametrize("name", list(_USES))
def test_a_non_affine_use_gives_what_an_int_would_and_runs_the_loop_concretely(name):
    loop = _FakeLoop()
    result = _USES[name](LoopIndex(3, ((loop, 1),)))
    assert result == _USES[name](3) and type(result) is type(_USES[name](3))
    assert name == "isinstance" or loop.degraded is not None


@nki.jit
def _guarded_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // 128):
        if r * 128 < R:                                       # true in every iteration: still stamps
            nl.store(out[r * 128:(r + 1) * 128, :], value=nl.load(a[r * 128:(r + 1) * 128, :]))
    return out


@needs_stamping
def test_a_comparison_with_the_same_answer_in_every_iteration_does_not_stop_stamping():
    _, fallbacks = assert_same_program(_guarded_kernel, SD((128 * 6, 64), "float32"))
    assert fallbacks == [] and _stamped_loops(_guarded_kernel, SD((128 * 6, 64), "float32")) == 1


def test_a_non_affine_use_after_a_loop_stamped_traces_the_kernel_again():
    loop = _FakeLoop(stamped=True)
    with pytest.raises(Retrace) as raised:
        bool(LoopIndex(3, ((loop, 1),)))
    assert raised.value.sites == (("here", 1),)


# -- fallbacks: kernels that use the iterator non-affinely still trace right -------------------------
def _copy_kernel(select):
    @nki.jit
    def kernel(a):
        R, C = a.shape
        out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(R // 128):
            t = nl.load(a[select(r) * 128:(select(r) + 1) * 128, :])
            if r == 0:                                       # branches on the iterator
                t = nl.multiply(t, 2.0)
            nl.store(out[r * 128:(r + 1) * 128, :], value=t)
        return out
    return kernel


@needs_stamping
def test_a_kernel_branching_on_the_iterator_falls_back_and_gives_the_concrete_program():
    kernel = _copy_kernel(lambda r: r)
    program, fallbacks = assert_same_program(kernel, SD((128 * 6, 64), "float32"))
    assert fallbacks and "__bool__" in fallbacks[0][1] or "__eq__" in fallbacks[0][1]
    assert program.opcode_counts()["tensor_scalar"] == 1


@nki.jit
def _lookup_table_kernel(a):
    R, C = a.shape
    rows = [0, 1, 3, 2, 5, 4]                                # a table indexed by the loop variable
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(6):
        t = nl.load(a[rows[r] * 128:(rows[r] + 1) * 128, :])
        nl.store(out[r * 128:(r + 1) * 128, :], value=t)
    return out


@nki.jit
def _carried_counter_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    done = 0
    for r in nl.affine_range(R // 128):
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.load(a[r * 128:(r + 1) * 128, :]))
        done += 1                                             # plain Python state carried across iterations
    nl.store(out[0:128, :], value=nl.load(a[(done - 1) * 128:done * 128, :]))
    return out


@nki.jit
def _tiles_in_a_list_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for r in nl.affine_range(R // 128):
        tiles.append(nl.load(a[r * 128:(r + 1) * 128, :]))
    for t in tiles[::-1]:
        nl.store(out[0:128, :], value=t)
    return out


@nki.jit
def _break_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // 128):
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.load(a[r * 128:(r + 1) * 128, :]))
        if plain(r) == R // 128 - 1:                   # leaves the last iteration early (unseen by
            break                                             # the iterator: plain() reads its value)
    return out


@nki.jit
def _triangular_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // 128):
        acc = nl.zeros((128, C), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.sequential_range(i + 1):                 # a bound that depends on the outer iterator
            acc[...] = nl.add(acc, nl.load(a[j * 128:(j + 1) * 128, :]))
        nl.store(out[i * 128:(i + 1) * 128, :], value=acc)
    return out


@nki.jit
def _named_tiles_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // 128):
        t = nl.ndarray((128, C), dtype=a.dtype, buffer=nl.sbuf, name=f"row{r}")
        nisa.dma_copy(dst=t, src=a[r * 128:(r + 1) * 128, :])
        nl.store(out[r * 128:(r + 1) * 128, :], value=t)
    return out


@nki.jit
def _pending_consumed_kernel(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, C), dtype=a.dtype, buffer=nl.sbuf)
    first = nl.load(a[0:128, :])                              # pending when the loop starts
    for r in nl.affine_range(R // 128):
        buf[...] = first                                      # iteration 0 loads straight into buf
        nl.store(out[r * 128:(r + 1) * 128, :], value=buf)
    return out


@pytest.mark.parametrize("kernel, reason", [
    (_pending_consumed_kernel, "assigned right after"),
    (_lookup_table_kernel, "__index__"), (_carried_counter_kernel, "done"), (_tiles_in_a_list_kernel, "tiles"),
    (_break_kernel, "left early"), (_triangular_kernel, "non-affinely"), (_named_tiles_kernel, "__format__"),
], ids=["pending result assigned", "table lookup", "carried counter", "tiles kept in a list", "break",
        "triangular loop", "f-string name"])
@needs_stamping
def test_kernels_that_loops_cannot_stamp_fall_back_and_give_the_concrete_program(kernel, reason):
    _, fallbacks = assert_same_program(kernel, SD((128 * 6, 64), "float32"))
    assert any(reason in why for _, why in fallbacks), fallbacks


def _listed_tiles_kernel(order):
    @nki.jit
    def kernel(a):
        R, C = a.shape
        out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
        tiles = [nl.ndarray((128, C), dtype=a.dtype, buffer=nl.sbuf) for _ in range(R // 128)]
        for t in range(R // 128):                             # Python loop: every tile exists
            nisa.dma_copy(dst=tiles[t], src=a[t * 128:(t + 1) * 128, :])
        picked = [tiles[i] for i in order(R // 128)]
        for r in nl.affine_range(R // 128):
            nl.store(out[r * 128:(r + 1) * 128, :], value=nl.exp(picked[r]))   # a list indexed by r
        return out
    return kernel


@needs_stamping
def test_a_list_of_tiles_in_affine_order_indexed_by_the_iterator_stamps():
    for order in (lambda n: range(n), lambda n: range(n - 1, -1, -1)):
        kernel = _listed_tiles_kernel(order)
        _, fallbacks = assert_same_program(kernel, SD((128 * 8, 64), "float32"))
        assert fallbacks == [] and _stamped_loops(kernel, SD((128 * 8, 64), "float32")) == 1


@needs_stamping
def test_a_list_of_tiles_in_irregular_order_indexed_by_the_iterator_falls_back():
    kernel = _listed_tiles_kernel(lambda n: [0, 1] + list(range(n - 1, 1, -1)))
    _, fallbacks = assert_same_program(kernel, SD((128 * 8, 64), "float32"))
    assert any("__index__" in why for _, why in fallbacks)


@needs_stamping
def test_a_loop_that_stamps_in_a_kernel_with_one_that_cannot_still_stamps():
    from trnlab.kernels import matmul_ladder
    args = (SD((2048, 2048), "float32"), SD((2048, 2048), "float32"))
    _, fallbacks = assert_same_program(matmul_ladder.matmul_fully_blocked, *args)
    assert fallbacks                                          # loops index nested lists of tiles
    assert _stamped_loops(matmul_ladder.matmul_fully_blocked, *args) > 0   # the others still stamp


# -- errors name the user's line, as in the concrete trace -------------------------------------------
@nki.jit
def _out_of_bounds_at_the_end(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // 128):
        t = nl.load(a[(r + 1) * 128:(r + 2) * 128, :])       # the last iteration reads past the end
        nl.store(out[r * 128:(r + 1) * 128, :], value=t)
    return out


def test_an_error_in_a_stamped_loop_is_the_concrete_traces_error_at_the_users_line():
    args = (SD((128 * 6, 64), "float32"),)
    messages = []
    for stamp in (True, False):
        with pytest.raises(Exception) as raised:
            _trace(_out_of_bounds_at_the_end, *args, stamp=stamp)
        messages.append((type(raised.value), str(raised.value)))
    assert messages[0] == messages[1]
    assert "test_trace_loops.py" in messages[0][1] and "(r + 1) * 128:(r + 2) * 128" in messages[0][1]


def test_a_stamped_program_saves_and_loads_like_the_concrete_one(tmp_path):
    from trnlab.hardware.program import Program
    from trnlab.kernels import matmul_ladder
    args = (SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"))
    stamped, concrete = _trace(matmul_ladder.matmul_tiled, *args, stamp=True), \
        _trace(matmul_ladder.matmul_tiled, *args, stamp=False)
    assert stamped.dumps() == concrete.dumps()
    stamped.save(tmp_path / "p.json")
    assert loops.first_difference(Program.load(tmp_path / "p.json"), Program.loads(concrete.dumps())) == ""


def test_full_mode_values_are_the_same_with_stamped_loops():
    from trnlab.kernels import matmul_ladder
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 256)).astype(np.float32), rng.standard_normal((512, 1024)).astype(np.float32)
    nki._PROGRAMS.clear()
    out = matmul_ladder.matmul_tiled(a, b)
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-3)


def test_the_comparison_names_the_first_record_that_differs():
    import copy
    from trnlab.kernels import matmul_ladder
    program = _trace(matmul_ladder.matmul_tiled, SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"), stamp=True)
    other = copy.deepcopy(program)
    other.instructions[7].operands["src"].index = (slice(0, 128, 1), slice(0, 128, 1))
    assert loops.first_difference(program, program) == ""
    assert loops.first_difference(program, other).startswith("instruction 7:")
    other = copy.deepcopy(program)
    other.buffers[5].last += 1
    assert loops.first_difference(program, other).startswith("buffer 5:")


@needs_stamping
def test_check_mode_traces_both_ways_and_refuses_a_difference(monkeypatch):
    from trnlab.kernels import matmul_ladder
    monkeypatch.setenv("TRNLAB_CHECK_LOOPS", "1")                          # read per trace, not at import
    args = (SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"))
    _trace(matmul_ladder.matmul_tiled, *args, stamp=True)                   # agrees: no error
    monkeypatch.setattr(loops, "first_difference", lambda a, b: "instruction 3: made up")
    with pytest.raises(AssertionError, match="stamped trace differs"):
        _trace(matmul_ladder.matmul_tiled, *args, stamp=True)
    monkeypatch.setenv("TRNLAB_CHECK_LOOPS", "0")
    _trace(matmul_ladder.matmul_tiled, *args, stamp=True)                   # off again: no second trace


@needs_stamping
def test_stamping_is_a_fast_path_the_fast_switch_turns_off():
    from trnlab.kernels import matmul_ladder
    args = (SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"))
    assert _stamped_loops(matmul_ladder.matmul_tiled, *args) > 0
    with config.override(fast=False):
        assert not loops.stamping_supported()
        assert _stamped_loops(matmul_ladder.matmul_tiled, *args, stamp=None) == 0   # every iteration traced


def test_stamping_runs_only_on_the_python_whose_bytecode_it_reads(monkeypatch):
    from trnlab.kernels import matmul_ladder
    args = (SD((512, 512), "bfloat16"), SD((512, 2048), "bfloat16"))
    monkeypatch.setattr(loops, "STAMPING_PYTHON", (3, 99))
    assert not loops.stamping_supported()
    assert _stamped_loops(matmul_ladder.matmul_tiled, *args) == 0


# -- kernels that place their own tiles: traced once, every loop concretely ----------------------------
class _GlobalAllocator:
    """A kernel's own SBUF address counter kept outside the kernel (AWS's allocated kernels keep
    theirs in a module global): each trace of the kernel asks for new addresses."""

    def __init__(self):
        self.offset = 0

    def allocate(self, nbytes: int):
        import trnlab.nki.compiler as ncc
        addr, self.offset = self.offset, self.offset + nbytes
        return ncc.sbuf.mod_alloc(base_addr=addr)


_ALLOCATOR = _GlobalAllocator()
_PASSES = _GlobalAllocator()          # its offset counts loop passes (an attribute: not seen by the checks)


@nki.jit
def _scaled_rows_with_own_addresses(a):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((nl.par_dim(128), C), dtype=a.dtype, buffer=_ALLOCATOR.allocate(C * 4))
    for r in nl.affine_range(R // 128):
        _PASSES.offset += 1
        tile[...] = nl.load(a[r * 128:(r + 1) * 128, :])
        # the third pass differs: a stamped loop (passes 0, 1, then n-1) finds out at n-1 and retraces
        scaled = nl.multiply(tile, 3.0 if _PASSES.offset == 3 else 2.0)
        nl.store(out[r * 128:(r + 1) * 128, :], value=scaled)
    return out


@needs_stamping
def test_a_kernel_with_direct_allocations_is_traced_once_with_every_loop_concrete():
    nki._PROGRAMS.clear()
    _ALLOCATOR.offset = _PASSES.offset = 0
    program = nki.trace(_scaled_rows_with_own_addresses, SD((128 * 6, 64), "float32"), target="trn2")
    nki._PROGRAMS.clear()
    assert _ALLOCATOR.offset == 64 * 4              # one trace: a retrace would have asked for new bytes
    assert ((), "no loop stamps after a direct allocation") in loops.fallbacks
    _ALLOCATOR.offset = _PASSES.offset = 0
    concrete = _trace(_scaled_rows_with_own_addresses, SD((128 * 6, 64), "float32"), stamp=False)
    assert loops.first_difference(program, concrete) == ""
