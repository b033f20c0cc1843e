"""trnlab.kernels.embedding: gather (an indirect DMA) and scatter-add (a one-hot matmul) against torch's embedding.

The forward is exact (every product is x * 1.0 or x * 0.0), so it is compared bit for bit, in fp32
and bf16. The backward sums repeated tokens' gradients in fp32 (atol 1e-5 against autograd).
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlab.nki as nki
from trnlab.kernels import embedding as emb


def _ids(seed, tokens, vocab):
    return torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(seed))


@settings(max_examples=6, deadline=None)
@given(tokens=st.integers(1, 300), vocab=st.integers(1, 200), dim=st.integers(1, 600))
def test_embedding_gather_is_exact_for_any_shape(tokens, vocab, dim):
    ids = _ids(tokens, tokens, vocab)
    table = torch.randn(vocab, dim, generator=torch.Generator().manual_seed(vocab))
    torch.testing.assert_close(emb.embedding(ids.int(), table), F.embedding(ids, table), rtol=0, atol=0)


def test_embedding_bf16_table_and_the_gpt_token_plus_position_tables():
    wte, wpe = torch.randn(43, 128).bfloat16(), torch.randn(32, 128).bfloat16()
    idx = _ids(1, 4 * 32, 43)
    out = emb.embedding(idx.int(), wte)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, wte[idx], rtol=0, atol=0)
    positions = torch.arange(32).repeat(4)
    torch.testing.assert_close(emb.embedding(positions.int(), wpe), wpe[positions], rtol=0, atol=0)


@settings(max_examples=6, deadline=None)
@given(tokens=st.integers(1, 300), vocab=st.integers(1, 200), dim=st.integers(1, 300))
def test_embedding_backward_scatter_adds_repeated_tokens(tokens, vocab, dim):
    ids = _ids(tokens + 1, tokens, vocab)
    table = torch.randn(vocab, dim).requires_grad_()
    grad_out = torch.randn(tokens, dim)
    F.embedding(ids, table).backward(grad_out)
    torch.testing.assert_close(emb.embedding_backward(ids.int(), grad_out, vocab), table.grad,
                               rtol=1e-5, atol=1e-5)


def test_embedding_backward_rows_of_unused_tokens_are_zero():
    ids = torch.tensor([2, 2, 2], dtype=torch.int32)
    grad = emb.embedding_backward(ids, torch.ones(3, 4), 5)
    expected = torch.zeros(5, 4)
    expected[2] = 3.0
    torch.testing.assert_close(grad, expected, rtol=0, atol=0)


def test_embedding_kernels_run_in_timing_only_mode():
    ids, table = nki.ShapeDtype((512,), "int32"), nki.ShapeDtype((100, 256), "bfloat16")
    grad = nki.ShapeDtype((512, 256), "bfloat16")
    for kernel, args in ((emb.embedding, (ids, table)), (emb.embedding_backward, (ids, grad, 100))):
        run = nki.run(kernel, *args, timing_only=True)
        assert run.outputs is None and run.latency_us > 0


def test_embedding_forward_is_one_indirect_dma_per_token_tile_and_refuses_ids_outside_the_table():
    ids, table = torch.tensor([0, 4, 4, 1], dtype=torch.int32), torch.randn(5, 8)
    run = nki.run(emb.embedding, ids, table)
    opcodes = [run.timeline[i].opcode for i in range(len(run.timeline))]
    assert opcodes == ["dma_copy", "dma_gather", "dma_copy"]          # ids in, rows gathered, rows out
    with pytest.raises(Exception, match="out-of-bounds"):
        emb.embedding(torch.tensor([0, 5], dtype=torch.int32), table)
