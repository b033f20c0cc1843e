"""log_softmax (and so a classifier's log-probabilities) compiles: written out over the last axis."""
import pytest
import torch
import torch.nn.functional as F

from trnlab import compiler


class LogProbs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 10)

    def forward(self, x):
        return F.log_softmax(30 * self.linear(x), dim=-1)          # large logits: no exp may overflow


@pytest.mark.parametrize("shape", [(8, 16), (2, 5, 16)])
def test_log_softmax_matches_pytorch_through_both_entry_points(shape):
    torch.manual_seed(0)
    model, x = LogProbs().eval(), torch.randn(*shape)
    ref = model(x)
    got = compiler.compile(model, (x,))(x)
    assert float(((got - ref).abs().max() / ref.abs().max()).detach()) < 1e-4
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="trnlab", dynamic=False)(x)
    assert float(((got - ref).abs().max() / ref.abs().max()).detach()) < 1e-4


def test_log_softmax_is_written_out_as_ops_with_kernels():
    torch.manual_seed(0)
    model, x = LogProbs().eval(), torch.randn(8, 16)
    ops = [n.op for n in compiler.compile(model, (x,)).graph.nodes]
    assert "aten._log_softmax.default" not in ops
    assert {"amax", "exp", "sum", "log"} <= set(ops)
