"""tiling: tile sizes chosen per op and honoured by the kernel; schedule: a topological order that puts
a consumer right after its producer where it can."""
import numpy as np
import torch
from hypothesis import given, settings, strategies as st

import trnlab.compiler as tc
from trnlab.compiler.ir import Graph
from trnlab.compiler.passes import schedule, tiling


@given(st.integers(min_value=1, max_value=5000))
def test_balanced_tiles_cover_the_extent_in_the_fewest_tiles(n):
    width = tiling.balanced(n, 512)
    tiles = -(-n // width)
    assert width <= 512 and tiles == -(-n // 512)            # no more tiles than 512-wide ones
    assert tiles * width - n < tiles                           # all tiles (nearly) the same width


def test_linear_tile_width_reaches_the_kernel_and_the_numbers_hold():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 576)).eval()     # N = 576: 2 x 288, not 512 + 64
    x = torch.randn(130, 64)
    compiled = tc.compile(model, (x,))
    (node,) = [n for n in compiled.graph.nodes if n.op == "linear"]
    assert node.attrs["tiles"] == {"m": 128, "n": 288, "k": 64, "grid": [2, 2, 1]}
    (call,) = [c for c in compiled.program.calls if c.kind == "kernel"]
    assert call.kwargs["tile_n"] == 288
    assert "n=288" in compiled.explain()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    matmuls = compiled.programs[0].opcode_counts()["nc_matmul"]
    assert matmuls >= 2 * 2                                    # 2 row stripes x 2 column tiles


def _random_graph(edges: list) -> Graph:
    g = Graph("random")
    g.add_input("x", (4,), "float32")
    names = ["x"]
    for i, picks in enumerate(edges):
        ins = sorted({names[p % len(names)] for p in picks}) or ["x"]
        names.append(g.add_node("add" if len(ins) > 1 else "gelu", ins[:2], (4,), "float32", name=f"n{i}").name)
    g.outputs = [names[-1]]
    return g


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=2), min_size=1, max_size=25))
def test_schedule_is_a_topological_order_of_every_op(edges):
    g = _random_graph(edges)
    before = [n.name for n in g.nodes]
    order = [n.name for n in schedule.order(g)]
    assert sorted(order) == sorted(before)                     # every op once
    position = {name: i for i, name in enumerate(order)}
    for n in g.nodes:                                          # every input before its reader
        assert all(position.get(i, -1) < position[n.name] for i in n.inputs)


def test_schedule_puts_a_consumer_right_after_its_producer():
    g = Graph("two chains")
    g.add_input("x", (4,), "float32")
    a = g.add_node("gelu", ["x"], (4,), "float32", name="a")
    b = g.add_node("gelu", ["x"], (4,), "float32", name="b")
    g.add_node("gelu", ["a"], (4,), "float32", name="a2")       # reads a, listed after b
    g.add_node("add", ["a2", "b"], (4,), "float32", name="out")
    g.outputs = ["out"]
    assert [n.name for n in schedule.order(g)] == ["a", "a2", "b", "out"]
    assert a and b
