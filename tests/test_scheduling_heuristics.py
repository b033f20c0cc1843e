"""The list schedule's heuristics (AWS's `nki.compiler.SchedulingHeuristic`): ASAP is the list
schedule as it was; CRITICAL_PATH and DMA_PREFETCH keep every dependency and the values, predict
the replay's times of their order, and change which ready instruction goes first — CRITICAL_PATH
the one on the longest path, DMA_PREFETCH a DMA before compute issuing at the same time."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
import trnlab.nki.isa as nisa
import trnlab.nki.language as nl
from trnlab import config
from trnlab.hardware import instruction_order
from trnlab.hardware.allocate import target_spec
from trnlab.hardware.device import Device
from trnlab.hardware.list_schedule import (HEURISTICS, _FRESH, _duration, build_graph, critical_paths,
                                           list_order)
from trnlab.hardware.records import END, ENGINE, READY, START
from trnlab.hardware.replay_timing import compiled_for
from trnlab.kernels import matmul_ladder as ladder
from test_hardware_engine_model import PROGRAMS, _replayed, _trace        # (the engine model's own cases)
from test_schedule_list import F, STEP, assert_keeps_every_dependency, random_kernel

SD = nki.ShapeDtype
W = 512                                   # free size of the hand-built kernels' tiles
OTHERS = [h for h in HEURISTICS if h != "asap"]


@pytest.fixture(autouse=True)
def program_order_traces(monkeypatch):
    """nki.trace gives program order here: each test schedules it itself."""
    monkeypatch.setattr(nki, "SCHEDULE", "program")


@nki.jit
def short_chain_first(a):
    """Two independent chains on one loaded tile, both starting on the Vector engine: a short one
    (one copy) written first, then a long one (a copy, then four exps on the Scalar engine)."""
    out = nl.ndarray((128, 2 * W), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    short = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=short, src=x, engine=nisa.engine.vector)
    first = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=first, src=x, engine=nisa.engine.vector)
    long = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=long, op=nl.exp, data=first)
    for _ in range(3):
        nisa.activation(dst=long, op=nl.exp, data=long, scale=0.01)
    nisa.dma_copy(dst=out[:, 0:W], src=short)
    nisa.dma_copy(dst=out[:, W:2 * W], src=long)
    return out


@nki.jit
def memset_then_load(a):
    """A memset (Vector) and a load (a DMA), both free to start at the launch, the memset first."""
    out = nl.ndarray((128, 2 * W), dtype=nl.float32, buffer=nl.shared_hbm)
    zeros = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    x = nl.ndarray((128, W), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=out[:, 0:W], src=zeros)
    nisa.dma_copy(dst=out[:, W:2 * W], src=x)
    return out


def _latency_us(program, target="trn2") -> float:
    return Device(target, mode="timing", cores=1).run(program, *[None] * len(program.inputs)).latency_us


def _opcodes_on(program, engine: str) -> list[str]:
    return [ins.opcode for ins in program.instructions if ins.engine == engine]


def test_asap_is_the_list_schedule_without_a_heuristic():
    program = nki.trace(ladder.matmul_tiled, SD((512, 256), "bfloat16"), SD((512, 512), "bfloat16"))
    plain, asap = [], []
    assert list_order(program, times=plain) == list_order(program, times=asap, heuristic="asap")
    assert plain == asap
    listed = instruction_order.scheduled(program, "list", heuristic="asap")
    assert listed.schedule == "list"
    assert [id(i) for i in listed.instructions] == [id(i) for i in instruction_order.scheduled(program).instructions]


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=40), n_sbuf=st.integers(2, 5), n_psum=st.integers(1, 3),
       target=st.sampled_from(["trn1", "trn2", "trn3"]), heuristic=st.sampled_from(OTHERS))
def test_every_heuristic_keeps_every_dependency_and_the_values(steps, n_sbuf, n_psum, target, heuristic):
    columns = 3
    # small integers: every sum exact in fp32, so the values must be identical bit for bit
    a = np.random.default_rng(len(steps)).integers(-2, 3, (128, columns * F)).astype(np.float32)
    program = nki.trace(random_kernel(steps, n_sbuf, n_psum, columns), a, target=target)
    listed = instruction_order.list_schedule(program, heuristic=heuristic)
    assert listed.schedule == f"list:{heuristic}"
    assert_keeps_every_dependency(program, listed)
    np.testing.assert_array_equal(Device(target, cores=1).run(listed, a).outputs,
                                  Device(target, cores=1).run(program, a).outputs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PROGRAMS, heuristic=st.sampled_from(OTHERS))
def test_every_heuristics_predicted_times_are_the_replays_of_its_order(steps, n_sbuf, n_psum, target, named,
                                                                      heuristic):
    program = _trace(steps, n_sbuf, n_psum, target, named)
    predicted: list = []
    order = list_order(program, times=predicted, heuristic=heuristic)
    records = _replayed(instruction_order.reorder(program, order, heuristic, keep_offsets=True), target)
    assert [predicted[k] for k in order] == [(r[ENGINE], r[START], r[END], r[READY]) for r in records]
    if heuristic == "dma_prefetch":       # it only breaks ties between engines: every time is ASAP's
        asap: list = []
        list_order(program, times=asap)
        assert predicted == asap


def test_a_critical_path_is_at_least_each_successors_plus_its_own_duration():
    program = nki.trace(short_chain_first, SD((128, W), "float32"))
    spec = target_spec(program)
    g, ops, _ = build_graph(program, compiled_for(program, spec).resolved(_FRESH))
    path = critical_paths(g, ops, spec.hbm_bandwidth)
    n = len(program)
    for u in range(n):
        reach, stack, seen = [], list(g.succ[u]), set()     # the instructions u waits for, through any vertex
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v < n:
                reach.append(v)
            else:
                stack.extend(g.succ[v])
        assert path[u] == pytest.approx(_duration(ops[u], spec.hbm_bandwidth) + max((path[v] for v in reach),
                                                                                    default=0.0))
    short, long = [k for k, ins in enumerate(program.instructions) if ins.opcode == "tensor_copy"]
    assert path[long] > path[short]


def test_critical_path_starts_the_long_chain_first_and_finishes_sooner():
    program = nki.trace(short_chain_first, SD((128, W), "float32"))
    copies = [k for k, ins in enumerate(program.instructions) if ins.opcode == "tensor_copy"]
    asap = list_order(program)
    critical = list_order(program, heuristic="critical_path")
    # ASAP: both copies are ready with the load; program order takes the short chain's first
    assert [k for k in asap if k in copies] == copies
    assert [k for k in critical if k in copies] == copies[::-1]
    faster = instruction_order.list_schedule(program, heuristic="critical_path")
    assert _latency_us(faster) < _latency_us(instruction_order.list_schedule(program))


def test_dma_prefetch_lists_a_dma_before_compute_that_starts_at_the_same_time():
    program = nki.trace(memset_then_load, SD((128, W), "float32"))
    assert [ins.opcode for ins in program.instructions[:2]] == ["memset", "dma_copy"]
    asap, prefetch = [], []
    assert list_order(program, times=asap)[:2] == [0, 1]
    assert list_order(program, times=prefetch, heuristic="dma_prefetch")[:2] == [1, 0]
    assert asap[0][1] == asap[1][1]                           # both start at the launch
    assert prefetch == asap                                   # each engine's queue, and every time, kept


def test_the_program_says_its_heuristic_and_names_compose():
    program = nki.trace(short_chain_first, SD((128, W), "float32"))
    listed = instruction_order.scheduled(program, "list", heuristic="critical_path")
    assert listed.schedule == "list:critical_path" and "schedule=list:critical_path" in str(listed)
    assert instruction_order.list_schedule(listed, heuristic="critical_path").schedule == "list:critical_path"
    assert instruction_order.list_schedule(listed).schedule == "list:critical_path+list"
    with pytest.raises(ValueError, match=r"unknown scheduling heuristic 'trivial'.*'critical_path'"):
        instruction_order.scheduled(program, "list", heuristic="trivial")
    with pytest.raises(ValueError, match="chooses within the list schedule"):
        instruction_order.scheduled(program, "hoist", heuristic="dma_prefetch")


@pytest.mark.parametrize("heuristic", OTHERS)
def test_the_fast_path_serves_only_asap(heuristic):
    program = nki.trace(ladder.matmul_tiled, SD((512, 256), "bfloat16"), SD((512, 512), "bfloat16"))
    with config.override(fast=True):
        fast = instruction_order.list_schedule(program, heuristic=heuristic)
    with config.override(fast=False):
        reference = instruction_order.list_schedule(program, heuristic=heuristic)
    assert [id(i) for i in fast.instructions] == [id(i) for i in reference.instructions]
    assert [id(i) for i in fast.instructions] == [id(program.instructions[k])
                                                  for k in list_order(program, heuristic=heuristic)]
