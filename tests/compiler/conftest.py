"""Small models the compiler tests compile (seeded): a tiny GPT and an MLP."""
import pytest
import torch

from trnlab.model.gpt import GPT, GPTConfig

TINY = GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)


class MLP(torch.nn.Module):
    def __init__(self, d_in=24, hidden=64, d_out=10):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.out(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


def tiny_gpt_model() -> GPT:
    torch.manual_seed(0)
    model = GPT(TINY)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return model.eval()


@pytest.fixture(scope="module")
def tiny_gpt():
    model = tiny_gpt_model()
    idx = torch.randint(0, TINY.vocab_size, (2, TINY.block_size), generator=torch.Generator().manual_seed(1))
    return model, idx


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(8, 24, generator=torch.Generator().manual_seed(2))
    return model, x


@pytest.fixture(scope="module")
def compiled_tiny_gpt(tiny_gpt):
    import trnlab.compiler as tc
    model, idx = tiny_gpt
    return tc.compile(model, (idx,))


@pytest.fixture
def fresh_dynamo():
    """Dynamo with no compiled frames of an earlier test, and the trnlab backend registered (after the
    reset: Dynamo's reset also clears the compile callbacks that report graph breaks)."""
    from trnlab.compiler import dynamo
    torch._dynamo.reset()
    dynamo.register()
    yield
    torch._dynamo.reset()
