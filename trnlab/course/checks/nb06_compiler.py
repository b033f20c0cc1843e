"""Checks for notebook 06, the compiler: a fusion rule graded by compiling models with it, and the
roofline test that says whether an op is memory-bound, graded on the ops of a compiled tiny GPT."""

from __future__ import annotations

import numpy as np
import torch

from trnlab.course.exercises import CheckFailed, exercise

NOTEBOOK = "06_the_compiler"


class _MLP(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.fc1 = torch.nn.Linear(24, 64, bias=bias)
        self.fc2 = torch.nn.Linear(64, 48, bias=bias)
        self.out = torch.nn.Linear(48, 10, bias=bias)

    def forward(self, x):
        return self.out(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


# -- 1. a fusion rule -------------------------------------------------------------------------------
@exercise("nb06_fuse_linear", notebook=NOTEBOOK, points=3, answer="fuse_matmul_bias_relu",
          title="Write the fusion rule matmul + bias + relu -> linear")
def check_fuse_linear(rule) -> None:
    import trnlab.compiler as tc
    from trnlab.compiler.passes import fuse
    if rule is fuse.fuse_linear:
        raise CheckFailed("that is the package's own fuse_linear: write the rule yourself")
    original = fuse.fuse_linear

    def refuse(*args, **kwargs):
        raise CheckFailed("your rule calls the package's fuse_linear: write the rewrite yourself")

    fuse.fuse_linear = refuse
    try:
        for bias in (True, False):
            torch.manual_seed(0)
            model = _MLP(bias).eval()
            x = torch.randn(16, 24, generator=torch.Generator().manual_seed(3))
            what = f"an MLP 24 -> 64 -> 48 -> 10 with relu{'' if bias else ', no biases'}"
            try:
                compiled = tc.compile(model, (x,), fusions=[rule])
            except tc.CompileError as e:
                raise CheckFailed(f"compiling {what} with your rule fails: op {e.op!r} was left without a kernel "
                                  f"({str(e).split(':')[0]}); every matmul, its bias add and its relu must become "
                                  f"one linear") from None
            ops = compiled.graph.ops()
            if ops.get("linear") != 3 or set(ops) - {"linear", "reshape"}:
                raise CheckFailed(f"expected 3 linear ops for {what}, got the ops {ops}")
            acts = [n.attrs.get("activation") for n in compiled.graph.nodes if n.op == "linear"]
            if acts != ["relu", "relu", None]:
                raise CheckFailed(f"expected activations ['relu', 'relu', None] for {what}, got {acts}: the relu "
                                  f"after a matmul goes into its linear's activation")
            with torch.no_grad():
                expected = model(x).numpy()
            got = np.asarray(compiled(x))
            err = float(np.abs(got - expected).max())
            if err > 1e-4:
                raise CheckFailed(f"the compiled {what} differs from PyTorch by up to {err:.3g}: check the weight "
                                  f"(transpose(W) is read as W with weight_layout='out_in') and the bias")
    finally:
        fuse.fuse_linear = original


# -- 2. memory-bound or compute-bound ---------------------------------------------------------------
@exercise("nb06_memory_bound", notebook=NOTEBOOK, points=2, answer="is_memory_bound",
          title="Predict which ops are memory-bound")
def check_memory_bound(is_memory_bound) -> None:
    from trnlab.hardware import presets
    cases = [  # (op, flops, hbm bytes, target, dtype)
        ("layer_norm [2048, 64]", 1.0e6, 1.05e6, "trn2", "float32"),
        ("linear fc [2048, 64] x [64, 256]", 67.1e6, 0.9e6, "trn2", "float32"),
        ("linear fc [2048, 64] x [64, 256]", 67.1e6, 0.9e6, "trn2", "bfloat16"),
        ("attention [64, 32, 192]", 16.8e6, 0.7e6, "trn1", "float32"),
        ("add [2048, 64]", 0.13e6, 1.57e6, "trn3", "float32"),
        ("linear lm_head [2048, 64] x [64, 43]", 11.3e6, 0.9e6, "trn3", "float32"),
        ("linear qkv, batch 512", 2.4e9, 30e6, "trn2", "bfloat16"),
    ]
    for op, flops, nbytes, target, dtype in cases:
        spec = presets.core_spec(target)
        peak, bandwidth = spec.peak_flops(dtype), spec.hbm_bandwidth
        expected = flops / nbytes < peak / bandwidth
        got = is_memory_bound(flops, nbytes, peak, bandwidth)
        if not isinstance(got, (bool, np.bool_)):
            raise CheckFailed(f"expected True or False, got {type(got).__name__} for {op}")
        if bool(got) != expected:
            raise CheckFailed(f"{op} on {target} ({dtype}): {flops:.3g} FLOPs over {nbytes:.3g} HBM bytes, "
                              f"peak {peak / 1e12:.1f} TFLOP/s, HBM {bandwidth / 1e9:.0f} GB/s per core: expected "
                              f"{'memory' if expected else 'compute'}-bound, your function says "
                              f"{'memory' if got else 'compute'}-bound")
