"""One engine timing model (trnlab/hardware/engines.py), three drivers: the list schedule's predicted
times equal the replay's of its order, and the directly driven core equals the replay, on programs
hypothesis writes (DMAs on chosen and named queues, matmul groups, Vector / Scalar / GpSimd
instructions, PSUM reads, random dependencies between them)."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab.hardware import instruction_order
from trnlab.hardware.device import Device
from trnlab.hardware.list_schedule import list_order
from trnlab.hardware.allocate import target_spec
from trnlab.hardware.records import END, ENGINE, READY, START, as_op
from trnlab.hardware.replay_timing import compiled_for

F = 64
ENGINES = (nisa.engine.vector, nisa.engine.scalar, nisa.engine.gpsimd)


@pytest.fixture(autouse=True)
def program_order_traces(monkeypatch):
    """nki.trace gives program order here: each test schedules it itself."""
    monkeypatch.setattr(nki, "SCHEDULE", "program")


def generated_kernel(steps, n_sbuf: int, n_psum: int):
    """A kernel of `steps` over a few SBUF [128, F] and PSUM [64, F] tiles; which tiles each step
    reads and writes (its dependencies) come from the step's numbers."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, n_sbuf * F), dtype=nl.float32, buffer=nl.shared_hbm)
        sb = [nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf) for _ in range(n_sbuf)]
        ps = [nl.ndarray((64, F), dtype=nl.float32, buffer=nl.psum) for _ in range(n_psum)]
        for s, t in enumerate(sb):
            nisa.dma_copy(dst=t, src=a[:, s * F:(s + 1) * F])
        for p in ps:
            nisa.memset(dst=p, value=0.0)
        for kind, x, y, z, e in steps:
            x, y, z = x % n_sbuf, y % n_sbuf, z % n_sbuf
            if kind == "dma":
                nisa.dma_copy(dst=sb[x], src=a[:, y * F:(y + 1) * F])
            elif kind == "sbuf_dma":
                nisa.dma_copy(dst=sb[x][:, 0:F // 2], src=sb[y][:, F // 2:F])
            elif kind == "vector":
                nisa.tensor_tensor(dst=sb[x], data1=sb[y], data2=sb[z], op=nl.add, engine=ENGINES[e % 2 * 2])
            elif kind == "activation":
                nisa.activation(dst=sb[x], data=sb[y], op=nl.exp, scale=0.01)
            elif kind == "copy":
                nisa.tensor_copy(dst=sb[x][:, 0:F // 2], src=sb[y][:, 0:F // 2], engine=ENGINES[e % 3])
            elif kind == "matmul":                     # a group of 1-3 matmuls into one PSUM tile
                p = ps[e % n_psum]
                for g in range(e % 3 + 1):
                    nisa.nc_matmul(dst=p, stationary=sb[(x + g * z) % n_sbuf][:, 0:64], moving=sb[y],
                                   accumulate=bool(g))
            elif kind == "drain":                      # a PSUM read (a shared port on some cores)
                nisa.tensor_copy(dst=sb[x][0:64, :], src=ps[e % n_psum], engine=ENGINES[e % 2])
            elif kind == "transpose":
                nisa.nc_transpose(dst=ps[e % n_psum][:, 0:64], data=sb[y][0:64, 0:64])
        for s, t in enumerate(sb):
            nisa.dma_copy(dst=out[:, s * F:(s + 1) * F], src=t)
        return out
    return kernel


STEP = st.tuples(st.sampled_from(["dma", "sbuf_dma", "vector", "activation", "copy", "matmul", "drain",
                                  "transpose"]),
                 st.integers(0, 7), st.integers(0, 7), st.integers(0, 7), st.integers(0, 5))
PROGRAMS = dict(steps=st.lists(STEP, min_size=1, max_size=30), n_sbuf=st.integers(2, 5),
                n_psum=st.integers(1, 3), target=st.sampled_from(["trn1", "trn2", "trn3"]),
                named=st.sampled_from([0, 2, 3]))


def _trace(steps, n_sbuf, n_psum, target, named):
    """The generated kernel traced; every `named`-th DMA on a queue the program names (as a compiler
    may), the others on the queue free first."""
    import copy
    from dataclasses import replace
    program = nki.trace(generated_kernel(steps, n_sbuf, n_psum), nki.ShapeDtype((128, 8 * F), "float32"),
                        target=target)
    if not named:
        return program
    named_program = copy.copy(program)
    named_program.instructions = [
        replace(ins, attrs={**ins.attrs, "queue": k % 3}, issue=None)
        if ins.opcode == "dma_copy" and k % named == 0 else ins for k, ins in enumerate(program.instructions)]
    for name in ("_plan", "_compiled", "_issue_spec", "_values_plan"):
        named_program.__dict__.pop(name, None)
    return named_program


def _replayed(program, target, checked=False):
    """The records of `program` launched once on a fresh core (the compiled replay, or every
    instruction issued to the core: `checked`)."""
    from trnlab.hardware import device as device_module
    device = Device(target, mode="timing", cores=1)
    original = device_module.execute
    device_module.execute = lambda *a, **k: original(*a, **k, checked=checked)
    try:
        device.run(program, *[None] * len(program.inputs))
    finally:
        device_module.execute = original
    return device.cores[0].timeline.records


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PROGRAMS)
def test_the_list_schedules_predicted_times_are_the_replays_of_its_order(steps, n_sbuf, n_psum, target,
                                                                        named):
    program = _trace(steps, n_sbuf, n_psum, target, named)
    predicted: list = []
    order = list_order(program, times=predicted)
    for op in compiled_for(program, target_spec(program)).resolved({"sbuf": (), "psum": ()}).ops:
        as_op(op)                    # every resolved op has its named class's fields
    listed = instruction_order.reorder(program, order, "list", keep_offsets=True)
    records = _replayed(listed, target)
    assert len(records) == len(order)
    assert _replayed(listed, target, checked=True) == records      # the core, driven directly, agrees
    for r, k in zip(records, order):
        assert predicted[k] == (r[ENGINE], r[START], r[END], r[READY]), \
            f"instruction {k} ({program.instructions[k].opcode}) at {order.index(k)} of the list order"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PROGRAMS)
def test_the_directly_driven_core_gives_the_replays_timeline(steps, n_sbuf, n_psum, target, named):
    program = _trace(steps, n_sbuf, n_psum, target, named)
    assert _replayed(program, target, checked=True) == _replayed(program, target)


def test_the_list_schedule_in_program_order_predicts_the_replay_of_a_tiled_matmul():
    from trnlab.kernels import matmul_ladder as ladder
    SD = nki.ShapeDtype
    program = nki.trace(ladder.matmul_tiled, SD((512, 256), "bfloat16"), SD((512, 512), "bfloat16"))
    predicted: list = []
    order = list_order(program, times=predicted)
    records = _replayed(instruction_order.reorder(program, order, "list", keep_offsets=True), "trn2")
    assert [predicted[k] for k in order] == [(r[ENGINE], r[START], r[END], r[READY]) for r in records]


def test_a_neuron_cores_instruction_set_does_not_depend_on_what_else_was_imported():
    code = ("import trnlab.hardware.core as c; "
            "names = ['nc_matmul_mx', 'quantize_mx', 'nc_matmul_double_row', 'all_reduce', 'all_gather', "
            "'reduce_scatter', 'collective_permute', 'nc_matmul', 'dma_copy', 'activation']; "
            "missing = [n for n in names if not hasattr(c.NeuronCore, n)]; "
            "print(missing); raise SystemExit(1 if missing else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_values_are_unchanged_by_the_engine_model():
    """(sanity) a generated program's outputs in full mode are NumPy's whatever the order."""
    steps = [("vector", 0, 1, 0, 0), ("matmul", 1, 0, 1, 1), ("drain", 0, 0, 0, 1), ("dma", 1, 2, 0, 4)]
    kernel = generated_kernel(steps, 3, 2)
    a = np.random.default_rng(0).standard_normal((128, 8 * F)).astype(np.float32)
    program = nki.trace(kernel, nki.ShapeDtype((128, 8 * F), "float32"))
    listed = instruction_order.list_schedule(program)
    one = Device("trn2", mode="full", cores=1).run(program, a).outputs
    two = Device("trn2", mode="full", cores=1).run(listed, a).outputs
    np.testing.assert_array_equal(np.asarray(one), np.asarray(two))


def test_a_stationary_tile_rewritten_between_two_matmuls_is_loaded_again_in_the_list_schedule():
    """The list schedule once compared the stationary tile by (buffer, region) only, while the core
    and the replay also compare its version: a tile rewritten since it was loaded holds other
    weights, so the Tensor engine must load it again (LoadStationary) — the core's rule. The list
    schedule's prediction now agrees with the replay."""
    steps = [("matmul", 0, 1, 0, 0), ("dma", 0, 2, 0, 0), ("matmul", 0, 1, 0, 0)]
    program = _trace(steps, 2, 1, "trn2", 0)
    predicted: list = []
    order = list_order(program, times=predicted)
    records = _replayed(instruction_order.reorder(program, order, "list", keep_offsets=True), "trn2")
    assert [predicted[k] for k in order] == [(r[ENGINE], r[START], r[END], r[READY]) for r in records]
