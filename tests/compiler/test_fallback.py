"""The host fallback: any op with a PyTorch implementation runs on the host CPU, reading weights and
numbers like the device does, with the partition boundary in the graph and its cost in the profile."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import trnlab.compiler as tc
from trnlab.compiler import dynamo, fallback


class SortsAWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.randn(8))

    def forward(self, x):
        s = torch.sort(self.scale).values                  # a host op reading a weight
        y = torch.sort(self.fc(x), dim=-1).values * s + 1.0
        return self.fc(y)


class Spectrum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)

    def forward(self, x):
        return self.fc(torch.fft.rfft(x, dim=-1).abs())   # complex values stay on the host


@pytest.mark.parametrize("model", [SortsAWeight(), Spectrum()], ids=["sort", "rfft"])
def test_fallback_runs_host_ops_and_matches_pytorch(model):
    x = torch.randn(4, 8)
    compiled = tc.compile(model, (x,), fallback=True)
    y = torch.as_tensor(np.asarray(compiled(x)))
    assert torch.allclose(y, model(x), rtol=1e-4, atol=1e-5)
    assert "[host]" in compiled.graph.to_text() and "partition boundary" in compiled.program.listing()


def test_host_ops_cost_their_transfers_and_compute_in_the_profile():
    x = torch.randn(4, 8)
    compiled = tc.compile(SortsAWeight(), (x,), fallback=True)
    profile = compiled.run(x).profile
    host = [o for o in profile.ops if o.bound == "host"]
    assert host and all(o.ns > 0 for o in host)
    calls = [c for c in compiled.program.calls if c.kind == "host"]
    sort_of_activations = next(c for c in calls if "linear" in c.inputs[0])
    expected = 2 * 4 * 8 * 4 / fallback.HOST_LINK_BYTES_PER_S * 1e9 + 2 * fallback.TRANSFER_LATENCY_NS
    assert sort_of_activations.cost["transfer_ns"] == pytest.approx(expected)
    assert profile.total_ns >= sum(o.ns for o in host)


def test_fallback_through_torch_compile_options():
    dynamo.register()
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    model = Spectrum()
    with torch.no_grad():
        y = torch.compile(model, backend="trnlab", options={"fallback": True})(x)
        assert torch.allclose(y, model(x), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_without_fallback_the_error_names_the_op_and_both_routes():
    with pytest.raises(tc.CompileError) as err:
        tc.compile(Spectrum(), (torch.randn(4, 8),))
    assert "fft" in str(err.value) and "fallback=True" in str(err.value) and "options=" in str(err.value)
