"""Helpers for the pass tests: a captured graph, and running passes up to one of them."""
from trnlab.compiler import capture
from trnlab.compiler.driver import CompileOptions
from trnlab.compiler.passes import run_pipeline


def graph_after(model, inputs, pass_name: str, **options):
    g, _ = capture.capture_export(model, inputs)
    final, records = run_pipeline(g, CompileOptions(**options), stop_after=pass_name)
    return final, records


def evaluate_graph(g, *inputs):
    """The graph's outputs, every op by its PyTorch reference (ops.evaluate)."""
    from trnlab.compiler.ops import evaluate, to_torch
    env = {name: to_torch(a) for name, a in g.constants.items()}
    env.update(dict(zip(g.inputs, inputs)))
    for n in g.nodes:
        env[n.name] = evaluate(n.op, n.attrs, [env[i] for i in n.inputs])
    return [env[o] for o in g.outputs]
