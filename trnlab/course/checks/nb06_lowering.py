"""Check for notebook 06's third exercise: a lowering rule for an op the compiler does not know.

`aten.leaky_relu.default(x, slope)` has no kernel. The student's rule rewrites it into ops that have
kernels (e.g. maximum(x, slope * x) for 0 < slope < 1); `run` compiles a small MLP with LeakyReLU with
the rule added to the fusion rules and sends back plain data — the compiled graph's op counts, whether
every op runs on the device, and the compiled model's output. The judging process rebuilds the same
MLP from the case's seeds and compares with PyTorch's output.
"""

from __future__ import annotations

import numpy as np
import torch

from trnlab.course import plain
from trnlab.course.errors import CheckFailed
from trnlab.course.exercises import exercise

NOTEBOOK = "06_the_compiler"


class _LeakyMLP(torch.nn.Module):
    def __init__(self, slope: float, sizes: tuple[int, int, int]):
        super().__init__()
        d_in, hidden, d_out = sizes
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.act = torch.nn.LeakyReLU(slope)
        self.fc2 = torch.nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _model_and_input(case: dict) -> tuple[_LeakyMLP, torch.Tensor]:
    torch.manual_seed(case["model_seed"])
    model = _LeakyMLP(case["slope"], tuple(case["sizes"])).eval()
    x = torch.randn(case["batch"], case["sizes"][0], generator=torch.Generator().manual_seed(case["input_seed"]))
    return model, x


# No asks_for: the package has no lowering of leaky_relu to switch off (the exercise asks for one).
@exercise("nb06_leaky_relu", notebook=NOTEBOOK, points=3, answer="lower_leaky_relu",
          title="Write a lowering rule for leaky_relu, an op without a kernel")
class LowerLeakyRelu:
    def cases(rng):
        return [{"slope": slope, "sizes": sizes, "batch": int(rng.integers(2, 17)),
                 "model_seed": int(rng.integers(0, 2**31)), "input_seed": int(rng.integers(0, 2**31))}
                for slope, sizes in ((0.01, [16, 32, 8]), (0.2, [24, 48, 10]),
                                     (float(np.round(rng.uniform(0.05, 0.9), 3)), [int(rng.choice([8, 20])), 40, 6]))]

    def run(rule, case):
        import trnlab.compiler as tc
        from trnlab.compiler.passes import fuse

        model, x = _model_and_input(case)
        try:
            compiled = tc.compile(model, (x,), fusions=[*fuse.FUSIONS, rule])
        except tc.CompileError as error:
            return {"compile_error": {"op": str(error.op), "rule": str(error).split(":")[0].split(" at ")[0]}}
        return {"ops": {plain.text(op, "an op name"): plain.integer(n) for op, n in compiled.graph.ops().items()},
                "host": plain.integer(sum(c.kind == "host" for c in compiled.program.calls)),
                "out": plain.array(np.asarray(compiled(x), dtype=np.float32), "the compiled model's output")}

    def judge(case, got):
        what = f"an MLP {' -> '.join(map(str, case['sizes']))} with LeakyReLU({case['slope']})"
        if "compile_error" in got:
            error = got["compile_error"]
            raise CheckFailed(f"compiling {what} with your rule fails: op {error['op']!r} was left without a kernel "
                              f"({error['rule']}); rewrite aten.leaky_relu.default into ops the compiler lowers")
        ops = got["ops"]
        left = [op for op in ops if op.startswith("aten.")]
        if left or got["host"]:
            raise CheckFailed(f"after your rule {what} still has the ops {left or ops}: every op must have a kernel")
        model, x = _model_and_input(case)
        with torch.no_grad():
            expected = model(x).numpy()
        if got["out"].shape != expected.shape:
            raise CheckFailed(f"expected an output of shape {expected.shape} for {what}, got {got['out'].shape}")
        err = float(np.abs(got["out"] - expected).max())
        if not err <= 1e-4 * max(1.0, float(np.abs(expected).max())):
            raise CheckFailed(f"expected the compiled {what} to match PyTorch, but it differs by up to {err:.3g}: "
                              f"leaky_relu(x) is x where x > 0 and slope * x elsewhere")
