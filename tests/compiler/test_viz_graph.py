"""trnlab.viz.graph draws a graph: one box per op, the host partition boxed when there is one."""
import matplotlib

matplotlib.use("Agg")

from trnlab.viz.graph import draw_graph, kind_of, layers  # noqa: E402


def test_draw_graph_has_one_box_per_op_and_rows_follow_dependencies(compiled_tiny_gpt):
    g = compiled_tiny_gpt.graph
    fig = draw_graph(g)
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if type(p).__name__ == "FancyBboxPatch"]
    assert len(boxes) == len(g.nodes)
    row = layers(g)
    assert all(row[n.name] > row[i] for n in g.nodes for i in n.inputs if i in row)
    assert {kind_of(n) for n in g.nodes} >= {"matmul", "norm", "elementwise", "view"}
