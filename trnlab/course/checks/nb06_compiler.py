"""Checks for notebook 06, the compiler (cases / run beside the student / judge elsewhere): a fusion
rule graded by compiling models with it, and the roofline test that says whether an op is
memory-bound, graded on the ops of a compiled tiny GPT.

The fusion rule runs where the student wrote it: `run` compiles an MLP with the rule as the only
fusion and sends back plain data — the op counts of the compiled graph, the linears' activations and
the compiled model's output. The judging process rebuilds the same MLP from the case's seeds and
compares with PyTorch's output.
"""

from __future__ import annotations

import numpy as np
import torch

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise
from trnlab.hardware import presets

NOTEBOOK = "06_the_compiler"


class _MLP(torch.nn.Module):
    def __init__(self, bias: bool, sizes: tuple[int, int, int, int] = (24, 64, 48, 10)):
        super().__init__()
        d_in, h1, h2, d_out = sizes
        self.fc1 = torch.nn.Linear(d_in, h1, bias=bias)
        self.fc2 = torch.nn.Linear(h1, h2, bias=bias)
        self.out = torch.nn.Linear(h2, d_out, bias=bias)

    def forward(self, x):
        return self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _model_and_input(case: dict) -> tuple[_MLP, torch.Tensor]:
    torch.manual_seed(case["model_seed"])
    model = _MLP(case["bias"], tuple(case["sizes"])).eval()
    x = torch.randn(case["batch"], case["sizes"][0], generator=torch.Generator().manual_seed(case["input_seed"]))
    return model, x


def _what(case: dict) -> str:
    return (f"an MLP {' -> '.join(map(str, case['sizes']))} with relu{'' if case['bias'] else ', no biases'} "
            f"(batch {case['batch']})")


# -- 1. a fusion rule -------------------------------------------------------------------------------
@exercise("nb06_fuse_linear", notebook=NOTEBOOK, points=3, answer="fuse_matmul_bias_relu",
          title="Write the fusion rule matmul + bias + relu -> linear",
          asks_for=("trnlab.compiler.passes.fuse.fuse_linear",))
class FuseLinear:
    def cases(rng):
        drawn = [int(rng.choice([16, 24, 40])), int(rng.choice([32, 64, 96])), int(rng.choice([48, 80])),
                 int(rng.choice([10, 12]))]
        return [{"bias": bias, "sizes": sizes, "batch": batch, "model_seed": int(rng.integers(0, 2**31)),
                 "input_seed": int(rng.integers(0, 2**31))}
                for bias, sizes, batch in ((True, [24, 64, 48, 10], 16), (False, [24, 64, 48, 10], 16),
                                           (bool(rng.integers(0, 2)), drawn, int(rng.integers(2, 33))))]

    def run(rule, case):
        import trnlab.compiler as tc

        model, x = _model_and_input(case)
        broken, calls = [], []

        def checked_rule(g):                      # the student's rule, then: is the graph still well formed?
            calls.append(1)
            if len(calls) > 4 * len(g.nodes) + 8:   # the pass applies a rule until it returns 0
                broken.append({"endless": len(calls) - 1})
                return 0
            count = rule(g)
            if not broken:
                broken.extend(_first_undefined_read(g))
            return 0 if broken else count
        try:
            compiled = tc.compile(model, (x,), fusions=[checked_rule])
        except tc.CompileError as error:
            return {"compile_error": {"op": str(error.op), "rule": str(error).split(":")[0].split(" at ")[0]}}
        except ValueError:
            if not broken:
                raise
        if broken:
            return {"broken_graph": broken[0]}
        linears = [n for n in compiled.graph.nodes if n.op == "linear"]
        activations = [n.attrs.get("activation") for n in linears]
        return {"ops": {plain.text(op, "an op name"): plain.integer(n) for op, n in compiled.graph.ops().items()},
                "activations": [None if a is None else plain.text(a, "a linear's activation") for a in activations],
                "out": plain.array(np.asarray(compiled(x), dtype=np.float32), "the compiled model's output")}

    def judge(case, got):
        what = _what(case)
        if "broken_graph" in got:
            b = got["broken_graph"]
            if "endless" in b:
                raise CheckFailed(f"on {what} your rule reported a fusion {b['endless']} times in a row: the pass "
                                  f"applies a rule until it returns 0, so return 0 when it found nothing to fuse "
                                  f"(and make sure a fused group no longer matches)")
            where = "a value your rule's own node replaced (it reads itself)" if b["later"] == "itself" else \
                (f"a value made later, by {b['later']}" if b["later"] else "a value no node makes")
            cause = (" This MLP has no biases: the matmul's only reader is the relu, not an add — check a reader's "
                     "op before taking its other input as the bias.") if not case["bias"] else ""
            raise CheckFailed(f"after your rule ran on {what}, node {b['node']!r} ({b['op']}) reads {b['value']!r}, "
                              f"{where}, so the graph cannot be scheduled.{cause}")
        if "compile_error" in got:
            error = got["compile_error"]
            raise CheckFailed(f"compiling {what} with your rule fails: op {error['op']!r} was left without a kernel "
                              f"({error['rule']}); expected every matmul, its bias add and its relu to become one "
                              f"linear")
        ops = got["ops"]
        if ops.get("linear") != 3 or set(ops) - {"linear", "reshape"}:
            raise CheckFailed(f"expected 3 linear ops for {what}, got the ops {ops}")
        if got["activations"] != ["relu", "relu", None]:
            raise CheckFailed(f"expected activations ['relu', 'relu', None] for {what}, got {got['activations']}: "
                              f"the relu after a matmul goes into its linear's activation")
        model, x = _model_and_input(case)
        with torch.no_grad():
            expected = model(x).numpy()
        if got["out"].shape != expected.shape:
            raise CheckFailed(f"expected an output of shape {expected.shape} for {what}, got {got['out'].shape}")
        err = float(np.abs(got["out"] - expected).max())
        if not err <= 1e-4:
            raise CheckFailed(f"expected the compiled {what} to match PyTorch, but it differs by up to {err:.3g}: "
                              f"check the weight (transpose(W) is read as W with weight_layout='out_in') and the bias")


def _first_undefined_read(g) -> list[dict]:
    """[the first node reading a value not defined before it (by an input, a constant or an earlier node)]."""
    defined = set(g.inputs) | set(g.constants)
    made_by = {n.name: n for n in g.nodes}
    for node in g.nodes:
        for value in node.inputs:
            if value is not None and value not in defined:
                later = "itself" if value == node.name else \
                    (f"{made_by[value].op} {value!r}" if value in made_by else "")
                return [{"node": node.name, "op": node.op, "value": value, "later": later}]
        defined.add(node.name)
    return []


# -- 2. memory-bound or compute-bound ---------------------------------------------------------------
MEMORY_BOUND_CASES = [  # (op, flops, hbm bytes, target, dtype): ops of the compiled tiny GPT, and a big linear
    ("layer_norm [2048, 64]", 1.0e6, 1.05e6, "trn2", "float32"),
    ("linear fc [2048, 64] x [64, 256]", 67.1e6, 0.9e6, "trn2", "float32"),
    ("linear fc [2048, 64] x [64, 256]", 67.1e6, 0.9e6, "trn2", "bfloat16"),
    ("attention [64, 32, 192]", 16.8e6, 0.7e6, "trn1", "float32"),
    ("add [2048, 64]", 0.13e6, 1.57e6, "trn3", "float32"),
    ("linear lm_head [2048, 64] x [64, 43]", 11.3e6, 0.9e6, "trn3", "float32"),
    ("linear qkv, batch 512", 2.4e9, 30e6, "trn2", "bfloat16"),
]


def _memory_case(op: str, flops: float, nbytes: float, target: str, dtype: str) -> dict:
    spec = presets.core_spec(target)
    return {"op": op, "flops": float(flops), "bytes": float(nbytes), "target": target, "dtype": dtype,
            "peak": float(spec.peak_flops(dtype)), "bandwidth": float(spec.hbm_bandwidth)}


@exercise("nb06_memory_bound", notebook=NOTEBOOK, points=2, answer="is_memory_bound",
          title="Predict which ops are memory-bound",
          asks_for=("trnlab.viz.roofline.attainable_flops", "trnlab.economics.fit.compute_bound_share"))
class MemoryBound:
    def cases(rng):
        cases = [_memory_case(*case) for case in MEMORY_BOUND_CASES]
        for _ in range(4):  # ops drawn on either side of the ridge point (never within 25 % of it)
            target, dtype = str(rng.choice(["trn1", "trn2", "trn3"])), str(rng.choice(["float32", "bfloat16"]))
            spec = presets.core_spec(target)
            ridge = spec.peak_flops(dtype) / spec.hbm_bandwidth
            side = float(rng.uniform(0.1, 0.8)) if rng.integers(0, 2) else float(rng.uniform(1.25, 8.0))
            nbytes = float(np.round(10 ** rng.uniform(5, 8)))
            cases.append(_memory_case(f"an op of {side * ridge:.3g} FLOPs/byte", side * ridge * nbytes, nbytes,
                                      target, dtype))
        return cases

    def run(is_memory_bound, case):
        got = is_memory_bound(case["flops"], case["bytes"], case["peak"], case["bandwidth"])
        if type(got) not in (bool, np.bool_):
            raise CheckFailed(f"expected True or False, got {type(got).__name__} for {case['op']}")
        return bool(got)

    def judge(case, got):
        expected = case["flops"] / case["bytes"] < case["peak"] / case["bandwidth"]
        if got != expected:
            raise CheckFailed(f"{case['op']} on {case['target']} ({case['dtype']}): {case['flops']:.3g} FLOPs over "
                              f"{case['bytes']:.3g} HBM bytes, peak {case['peak'] / 1e12:.1f} TFLOP/s, HBM "
                              f"{case['bandwidth'] / 1e9:.0f} GB/s per core: expected "
                              f"{'memory' if expected else 'compute'}-bound, your function says "
                              f"{'memory' if got else 'compute'}-bound")
