"""Graph breaks are visible: a model Dynamo cannot hand to the backend whole warns once, naming the
reason and the line, instead of silently running in eager PyTorch."""
import inspect
import warnings

import torch
import torch.nn as nn

from trnlab.compiler import dynamo
from trnlab.compiler.graph_breaks import GraphBreakWarning


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum().item() > 0:
            return x * 2
        return x - 1


def _warnings(model, x, calls=2):
    torch._dynamo.reset()
    dynamo.register()                       # after a reset: Dynamo's reset clears the compile callbacks
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            compiled = torch.compile(model, backend="trnlab")
            for _ in range(calls):
                compiled(x)
    torch._dynamo.reset()
    return [str(w.message) for w in caught if issubclass(w.category, GraphBreakWarning)]


def test_rnn_model_warns_once_that_it_runs_in_eager():
    found = _warnings(GRUClassifier(), torch.randn(2, 5, 8))
    assert len(found) == 1
    assert "no graph" in found[0] and "RNN, GRU, or LSTM" in found[0] and "test_graph_breaks.py:" in found[0]


def test_data_dependent_control_flow_names_the_graph_break():
    found = _warnings(DataDependent(), torch.randn(3))
    line = inspect.getsourcelines(DataDependent.forward)[1] + 1                # the `if x.sum().item() > 0:`
    assert len(found) == 1 and "item()" in found[0] and f"test_graph_breaks.py:{line} (in forward)" in found[0]


def test_a_whole_graph_gives_no_warning():
    assert _warnings(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4)) == []
