"""lower: each op -> one kernel call with its region and source line; an op without a kernel raises
CompileError naming it (or, with fallback=True, runs on the host with the partition boundary marked)."""
import pytest
import torch

import trnlab.compiler as tc


class WithCumsum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.cumsum(h, dim=-1)            # no kernel for this
        return self.fc2(h)


def test_program_has_one_kernel_per_fused_op_with_regions_and_sources(compiled_tiny_gpt):
    program = compiled_tiny_gpt.program
    kernels = [c for c in program.calls if c.kind == "kernel"]
    assert [c.kernel for c in kernels].count("causal_attention_qkv") == 2
    names = [c.kernel for c in kernels]
    # ln_1 -> qkv, ln_2 -> fc (per block) and ln_f -> lm_head: the normalised rows stay in SBUF
    assert names.count("layer_norm_linear") == 2 * 2 + 1 and names.count("linear") == 2 * 2
    assert "layer_norm" not in names and names.count("add") == 1             # residual adds fused
    assert len({c.region for c in program.calls}) == len(program.calls)
    assert all(c.source.startswith("gpt.py:") for c in kernels)
    assert "kernel %attention = causal_attention_qkv" in program.listing()


def test_unsupported_op_raises_compile_error_naming_op_line_and_supported_ops():
    model = WithCumsum().eval()
    with pytest.raises(tc.CompileError) as info:
        tc.compile(model, (torch.randn(4, 16),))
    e = info.value
    assert e.op == "aten.cumsum.default"
    assert "test_lower.py" in e.source and "torch.cumsum(h, dim=-1)" in e.source
    assert "linear" in e.supported and "Supported ops:" in str(e) and "fallback=True" in str(e)


def test_fallback_runs_the_op_on_the_host_with_the_boundary_marked():
    torch.manual_seed(0)
    model = WithCumsum().eval()
    x = torch.randn(4, 16)
    compiled = tc.compile(model, (x,), fallback=True)
    host = [c for c in compiled.program.calls if c.kind == "host"]
    assert [c.op for c in host] == ["aten.cumsum.default"]
    assert {d for _, d in compiled.program.boundaries} == {"neuron->host", "host->neuron"}
    assert "[host]" in compiled.graph.to_text() and "partition boundary" in compiled.program.listing()
    # one program per device partition: fc1 (+relu) | cumsum on the CPU | fc2
    assert [p.kind for p in compiled.executable.partitions] == ["device", "host", "device"]
    assert len(compiled.programs) == 2
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch, kernel", [(1, "causal_attention_qkv"), (3, "causal_attention_qkv_packed")])
def test_short_sequences_lower_to_the_attention_kernel_that_packs_them(batch, kernel):
    """T = 32: with two or more sequences, 128 // 32 = 4 of them share a tile (the tiling pass records it)."""
    from trnlab.model.gpt import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=32, n_layer=1, n_head=2, n_embd=16)).eval()
    idx = torch.randint(0, 16, (batch, 32), generator=torch.Generator().manual_seed(0))
    compiled = tc.compile(model, (idx,))
    assert [c.kernel for c in compiled.program.calls if c.op == "attention"] == [kernel]
    tiles = next(n.attrs["tiles"] for n in compiled.graph.nodes if n.op == "attention")
    assert tiles["per"] == ("batch x head" if batch == 1 else "head x 3 sequences")
    with torch.no_grad():
        torch.testing.assert_close(compiled(idx)[0], model(idx)[0], rtol=1e-4, atol=1e-5)
