"""Loop tracing, the outermost stamping loop (trnlab/nki/loops.py, `_reduced_plan`): a loop of 12 or
more iterations that no other stamping loop encloses rebuilds only the parts of its records that
vary, shares the equal varying parts (accesses, nested tuples) of one iteration's records, and
makes its instructions and buffers from copies of iteration 0's attribute dicts. The program must
still be the concrete trace's, record for record (the tests of test_trace_loops.py use loops too
short to take this path)."""
from __future__ import annotations

import math
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.language as nl
from trnlab.hardware.program import Access
from trnlab.nki import loop_records, loops
from test_trace_loops import SD, assert_same_program

# loop stamping reads CPython 3.11 bytecode; on any other Python every loop is traced concretely
needs_stamping = pytest.mark.skipif(sys.version_info[:2] != loops.STAMPING_PYTHON,
                                    reason="loop stamping runs on CPython 3.11 only (nki/loops.py)")



def _outermost_plans(kernel, *args, **kwargs) -> list:
    """The (records per iteration, shared slots) of every outermost stamping plan of a trace."""
    plans = []
    original = loops._reduced_plan

    def counting(plan, records, v0, dv):
        result = original(plan, records, v0, dv)
        plans.append((len(records), result[2]))
        return result
    loops._reduced_plan = counting
    try:
        nki._PROGRAMS.clear()
        nki.trace(kernel, *args, target="trn2", **kwargs)
    finally:
        loops._reduced_plan = original
        nki._PROGRAMS.clear()
    return plans


@nki.jit
def _rows_with_constants(a, b):
    """Per [128, C] row tile: constants of several types in the instructions (0.0 and -0.0, 1 and
    1.0), a reduction into a [128, 1] tile and a second store — parts that compare equal in
    Python without being the same."""
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((R, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // 128):
        x = nl.load(a[r * 128:(r + 1) * 128, :])
        y = nl.load(b[nl.ds(r * 128, 128), 0:C])
        z = nl.add(nl.multiply(x, 1.0), nl.multiply(y, 1))
        w = nl.add(nl.maximum(z, 0.0), nl.maximum(x, -0.0))
        nl.store(out[r * 128:(r + 1) * 128, :], value=nl.exp(w))
        nl.store(sums[r * 128:(r + 1) * 128, :], value=nl.sum(w, axis=1, keepdims=True))
    return out, sums


def _cases():
    from trnlab.kernels import matmul_ladder
    from test_trace_loops import _tiled_add_scale
    f32, bf16 = "float32", "bfloat16"
    rows = SD((128 * 13, 256), f32)              # 13 row tiles
    return [
        ("ladder tiled", matmul_ladder.matmul_tiled, (SD((256, 128 * 12), bf16), SD((256, 1024), bf16))),
        ("ladder hoisted", matmul_ladder.matmul_hoisted, (SD((256, 128 * 12), bf16), SD((256, 1024), bf16))),
        ("add and scale, a sequential loop inside", _tiled_add_scale, (rows, rows, 3.0)),
        ("constants of several types", _rows_with_constants, (rows, rows)),
    ]


@needs_stamping
@pytest.mark.parametrize("name, kernel, args", _cases(), ids=[c[0] for c in _cases()])
def test_an_outermost_loop_of_many_iterations_stamps_the_concrete_program(name, kernel, args):
    assert _outermost_plans(kernel, *args), "the kernel did not take the outermost stamping path"
    assert_same_program(kernel, *args)


@needs_stamping
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(12, 16), n=st.integers(1, 3), k=st.integers(1, 4), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_property_outermost_stamped_matmul_equals_the_concrete_trace(m, n, k, dtype):
    from trnlab.kernels import matmul_ladder
    args = (SD((128 * k, 128 * m), dtype), SD((128 * k, 512 * n), dtype))
    assert _outermost_plans(matmul_ladder.matmul_tiled, *args)
    assert_same_program(matmul_ladder.matmul_tiled, *args, replay=m * n * k < 60)


@needs_stamping
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(12, 20), width=st.sampled_from([64, 256, 512]), scale=st.floats(0.5, 4.0),
       constants=st.booleans())
def test_property_outermost_stamped_elementwise_loops_equal_the_concrete_trace(rows, width, scale, constants):
    from test_trace_loops import _tiled_add_scale
    a = SD((128 * rows, width), "float32")
    if constants:
        args, kernel = (a, a), _rows_with_constants
    else:
        args, kernel = (a, a, scale), _tiled_add_scale
    assert _outermost_plans(kernel, *args)
    assert_same_program(kernel, *args, replay=rows < 16)


@needs_stamping
def test_a_stamped_iteration_builds_an_equal_access_once_and_its_records_share_it(monkeypatch):
    """In matmul_tiled the tile a DMA loads is the matmul's operand: one Access object for both in
    every stamped iteration of m, and the lhsT tile's source region one object for all n. (Records
    looked up by position: traced in program order.)"""
    monkeypatch.setattr(nki, "SCHEDULE", "program")
    from trnlab.kernels import matmul_ladder
    args = (SD((256, 128 * 12), "bfloat16"), SD((256, 1024), "bfloat16"))
    (records, slots), = _outermost_plans(matmul_ladder.matmul_tiled, *args)
    assert slots > 0
    program, _ = assert_same_program(matmul_ladder.matmul_tiled, *args, replay=False)
    per_m = len(program) // 12
    start = 5 * per_m                                     # iteration m = 5: stamped
    body = program.instructions[start:start + per_m]
    loads = [i for i in body if i.opcode == "dma_copy" and i.operands["src"].buffer == program.inputs[0][1]]
    products = [i for i in body if i.opcode == "nc_matmul"]
    assert len(loads) == len(products) == 2 * 2          # n = 2 tiles, k = 2 tiles
    for load, product in zip(loads, products):
        assert product.operands["stationary"] is load.operands["dst"]
        assert type(product.operands["stationary"]) is Access
    assert loads[0].operands["src"] is loads[2].operands["src"]          # k = 0 for n = 0 and n = 1
    assert loads[0].operands["src"] == Access(program.inputs[0][1], (slice(0, 128, 1), slice(640, 768, 1)))
    # records themselves are never shared: passes rewrite them in place
    assert len({id(i) for i in program.instructions}) == len(program)
    assert len({id(b) for b in program.buffers}) == len(program.buffers)
    assert len({id(i.__dict__) for i in program.instructions}) == len(program)


_plain = st.recursive(
    st.one_of(st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True, width=16), st.booleans(),
              st.none(), st.sampled_from(["a", "b", ""]),
              st.builds(slice, st.integers(0, 3), st.integers(0, 3), st.one_of(st.none(), st.integers(1, 2)))),
    lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)


def _typed(x):
    """x's value with the type of every part (what sharing an object in place of another keeps)."""
    if isinstance(x, tuple):
        return ("tuple",) + tuple(_typed(e) for e in x)
    if isinstance(x, slice):
        return ("slice", _typed(x.start), _typed(x.stop), _typed(x.step))
    if isinstance(x, float):
        return ("float", "nan" if math.isnan(x) else repr(x))
    return (type(x).__name__, repr(x))


@settings(max_examples=400, deadline=None)
@given(_plain, _plain)
def test_property_parts_are_shared_only_when_equal_in_value_and_type_all_the_way_down(a, b):
    # 1, 1.0 and True, or 0.0 and -0.0, compare equal in Python: a shared part must not swap them
    assert (loop_records._strict(a) == loop_records._strict(b)) == (_typed(a) == _typed(b))


def test_an_outermost_stamped_program_saves_and_loads_like_the_concrete_one(tmp_path):
    from trnlab.hardware.program import Program
    from test_trace_loops import _trace
    rows = SD((128 * 13, 256), "float32")
    stamped = _trace(_rows_with_constants, rows, rows, stamp=True)
    concrete = _trace(_rows_with_constants, rows, rows, stamp=False)
    assert stamped.dumps() == concrete.dumps()
    stamped.save(tmp_path / "p.json")
    assert loops.first_difference(Program.load(tmp_path / "p.json"), Program.loads(concrete.dumps())) == ""
