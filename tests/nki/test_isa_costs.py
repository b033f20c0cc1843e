"""The cost model's figures for NKI 0.7's selection, gather and shuffle instructions
(`cost.selection_cycles`): AWS's published estimates where there are some, the ASSUMED ones as
docs/nki_compat.md states them."""
import pytest

from trnlab.hardware import cost, presets


def _operand(free, memory="sbuf", dtype="float32"):
    return cost.Operand(memory, (128, free), dtype, 128, free, 128 * free * 4)


def _cycles(opcode, free, engine="dve", reads=None, **attrs):
    instr = cost.Instruction(opcode, engine, reads or (_operand(free),), (_operand(free),), attrs)
    return cost.cost(instr, presets.core_spec("trn2")).cycles


SPEC = presets.core_spec("trn2")
STATIC, MIN_II = SPEC.vector_static_cycles, SPEC.activation_min_cycles


@pytest.mark.parametrize("opcode", ["max8", "nc_find_index8", "nc_match_replace8"])
def test_the_top8_instructions_cost_n(opcode):
    assert _cycles(opcode, 1000) == STATIC + 1000


@pytest.mark.parametrize("passes, n, expected", [(1, 1000, 1000), (2, 1000, 2000), (1, 10, MIN_II), (2, 10, MIN_II)])
def test_tensor_copy_predicated_costs_the_published_table(passes, n, expected):
    assert _cycles("tensor_copy_predicated", n, passes=passes) == STATIC + expected


@pytest.mark.parametrize("opcode", ["range_select", "exponential", "tensor_scalar_cumulative", "nc_stream_shuffle"])
def test_the_one_pass_vector_instructions_cost_max_min_ii_n(opcode):
    assert _cycles(opcode, 10) == STATIC + MIN_II
    assert _cycles(opcode, 1000) == STATIC + 1000


@pytest.mark.parametrize("opcode", ["range_select", "exponential"])
def test_reducing_into_the_registers_adds_min_ii(opcode):
    assert _cycles(opcode, 1000, reduce=True) == STATIC + 1000 + MIN_II


def test_the_gpsimd_instructions_assumed_costs():
    assert _cycles("nonzero_with_count", 300, "pool") == STATIC + 300
    assert _cycles("sequence_bounds", 300, "pool") == STATIC + 600
    assert _cycles("nc_n_gather", 1025, "pool") == 3 * STATIC + 1025      # ceil(1025 / 512) ISA instructions
    assert _cycles("local_gather", 4, "pool", elements=256) == STATIC + 256
    assert _cycles("topk", 4, "pool", elements=300) == STATIC + 300
    assert _cycles("activate2", 300, "pool") == STATIC + 300


def test_activate2_on_the_scalar_engine_costs_an_activation():
    assert _cycles("activate2", 300, "act") == SPEC.activation_static_cycles + max(MIN_II, 300)
    assert _cycles("activate2", 300, "act", reduce=True) == SPEC.activation_static_cycles + 300 + MIN_II
