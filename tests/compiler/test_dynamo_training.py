"""torch.compile(model, backend="trnlab") trains: AOT Autograd's forward and backward graphs, each
lowered by the training lowering and run on the simulated Trainium, give PyTorch eager's gradients."""
import copy

import pytest
import torch

from trnlab.compiler import dynamo
from trnlab.compiler.errors import CompileError
from trnlab.training.run import tiny_model, train_batches


class GeluMLP(torch.nn.Module):
    """A small classifier whose every op has a training kernel (Linear, GELU, cross-entropy)."""

    def __init__(self, d_in=24, hidden=64, classes=10):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x, y):
        logits = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        return logits, torch.nn.functional.cross_entropy(logits, y)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")      # tests/compiler/conftest.py


def _compare_grads(model, batch):
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="trnlab")
    loss = compiled(*batch)[1]
    loss.backward()
    ref_loss = reference(*batch)[1]
    ref_loss.backward()
    assert float(loss.detach()) == pytest.approx(float(ref_loss.detach()), rel=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert p.grad is not None, name
        scale = float(q.grad.abs().max()) or 1.0
        assert float((p.grad - q.grad).abs().max()) / scale < 1e-4, name


def test_compiled_gpt_backward_matches_eager_gradients():
    _compare_grads(tiny_model(seed=0), train_batches(steps=1, batch_size=4, seed=0)[0])
    programs = dynamo.backend.last_training
    backward = programs["backward"]
    # the backward graph was lowered to trnlab kernels and ran on the device
    kernels = {c.kernel for c in backward.calls if c.kind == "kernel"}
    assert {"cross_entropy.cross_entropy_backward", "norms.layer_norm_backward", "activations.gelu_backward",
            "softmax.softmax_backward", "embedding.embedding_backward"} <= kernels
    assert backward.last_run is not None and backward.last_run.latency_ns > 0
    assert all(c.region.startswith("backward/") for c in backward.calls)
    assert programs["forward"].last_run.latency_ns > 0


def test_compiled_mlp_backward_matches_eager_gradients():
    torch.manual_seed(0)
    model = GeluMLP()
    gen = torch.Generator().manual_seed(3)
    batch = (torch.randn(16, 24, generator=gen), torch.randint(0, 10, (16,), generator=gen))
    _compare_grads(model, batch)


def test_compiled_training_steps_follow_eager_sgd():
    """The compiled forward takes the parameters as runtime inputs: after optimizer steps the next
    forward sees the new weights (no recompilation, no stale constants)."""
    torch.manual_seed(0)
    model = GeluMLP()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="trnlab")
    gen = torch.Generator().manual_seed(4)
    batch = (torch.randn(16, 24, generator=gen), torch.randint(0, 10, (16,), generator=gen))
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, reference))
    for _ in range(3):
        for m, o, f in ((model, opt, compiled), (reference, ref_opt, reference)):
            o.zero_grad()
            loss = f(*batch)[1]
            loss.backward()
            o.step()
    assert float(compiled(*batch)[1].detach()) == pytest.approx(float(reference(*batch)[1].detach()), rel=1e-4)


def test_training_op_without_a_kernel_is_a_compile_error_naming_it():
    class CumsumNet(GeluMLP):                # cumsum has no kernel
        def forward(self, x, y):
            logits = self.fc2(torch.cumsum(self.fc1(x), dim=-1))
            return logits, torch.nn.functional.cross_entropy(logits, y)

    torch.manual_seed(0)
    compiled = torch.compile(CumsumNet(), backend="trnlab")
    batch = (torch.randn(4, 24), torch.randint(0, 10, (4,)))
    with pytest.raises(Exception, match="cannot lower training op"):
        compiled(*batch)[1].backward()


def test_inference_under_no_grad_still_uses_the_forward_compiler():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.GELU(), torch.nn.Linear(64, 10))
    x = torch.randn(4, 24)
    dynamo.backend.last_training = None
    with torch.no_grad():
        out = torch.compile(model, backend="trnlab")(x)
        ref = model(x)
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert dynamo.backend.last_training is None          # no training programs were compiled


def test_inference_only_options_are_refused_when_training():
    torch.manual_seed(0)
    batch = (torch.randn(4, 24), torch.randint(0, 10, (4,)))
    dynamo.configure(fallback=True)
    try:
        with pytest.raises(Exception, match="options \\['fallback'\\] are not supported"):
            torch.compile(GeluMLP(), backend="trnlab")(*batch)
    finally:
        dynamo.configure()


def test_log_probs_the_model_returns_are_not_replaced_by_logits():
    """The forward saves the logits for the loss's backward instead of log_softmax(logits) — but a
    log-softmax the model itself returns is its output and stays one."""
    class LogProbs(GeluMLP):
        def forward(self, x, y):
            logp = torch.log_softmax(self.fc2(torch.nn.functional.gelu(self.fc1(x))), dim=-1)
            return logp, torch.nn.functional.nll_loss(logp, y)

    torch.manual_seed(0)
    model = LogProbs()
    batch = (torch.randn(8, 24), torch.randint(0, 10, (8,)))
    # a log-softmax the model returns is computed as one (compiler/passes/legalise_nn.py), never the logits
    logp, loss = torch.compile(model, backend="trnlab")(*batch)
    ref_logp, ref_loss = model(*batch)
    assert torch.allclose(logp, ref_logp, rtol=1e-4, atol=1e-5)
    assert float(loss.detach()) == pytest.approx(float(ref_loss.detach()), rel=1e-5)
    # the loss's backward through a materialised log-softmax has no kernel: refused by name
    with pytest.raises(Exception, match=r"cannot lower training op 'aten\.nll_loss_backward\.default'"):
        loss.backward()


def test_the_compiler_reaches_the_training_lowering_only_through_what_training_lent_it(monkeypatch):
    from trnlab.training import aot
    assert dynamo._training is aot.dynamo_backend            # lent when trnlab.training was imported
    monkeypatch.setattr(dynamo, "_training", None)
    monkeypatch.setattr(dynamo, "_lend_training_from_the_package", lambda: None)     # no entry point
    with pytest.raises(CompileError, match="import trnlab.training"):
        dynamo._training_backend(None, [], [], {})


def test_torch_compile_trains_without_importing_trnlab_training_first(tmp_path):
    # a student's script: only torch and trnlab.compiler; the package's entry point lends the gradient path
    import subprocess
    import sys
    script = tmp_path / "student.py"
    script.write_text(
        "import sys, torch\n"
        "import trnlab.compiler\n"
        "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))\n"
        "x, y = torch.randn(4, 8), torch.randn(4, 4)\n"
        "loss = torch.nn.functional.mse_loss(torch.compile(model, backend='trnlab')(x), y)\n"
        "loss.backward()\n"
        "print('trained' if model[0].weight.grad is not None else 'no grad',\n"
        "      'trnlab.training' in sys.modules)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["trained", "True"]
