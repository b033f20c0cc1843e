"""The tiny GPT: shapes, causality, parameter and FLOP accounting, generation and its errors."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trnlab.data import CharTokenizer
from trnlab.model import GPT, GPTConfig, PromptTooLongError, ask, ask_many, exact_match, is_matmul, layer_costs

tokenizer = CharTokenizer()
CONFIG = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=32)


def make_model(config: GPTConfig = CONFIG, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).eval()


def test_logits_shape_and_loss():
    model = make_model()
    idx = torch.randint(0, CONFIG.vocab_size, (3, 10))
    logits, loss = model(idx)
    assert logits.shape == (3, 10, CONFIG.vocab_size) and loss is None
    _, loss = model(idx, idx)
    # an untrained model is close to uniform: loss near ln(vocab)
    assert abs(loss.item() - torch.log(torch.tensor(float(CONFIG.vocab_size)))) < 0.5


def test_attention_is_causal_future_tokens_do_not_change_the_past():
    model = make_model()
    idx = torch.randint(0, CONFIG.vocab_size, (1, 12))
    changed = idx.clone()
    changed[0, 7:] = (changed[0, 7:] + 1) % CONFIG.vocab_size
    before, _ = model(idx)
    after, _ = model(changed)
    torch.testing.assert_close(before[:, :7], after[:, :7])
    assert not torch.allclose(before[:, 7:], after[:, 7:])


def test_attention_rows_are_distributions_over_the_past():
    model = make_model()
    model(torch.randint(0, CONFIG.vocab_size, (2, 9)), keep_attention=True)
    for attention in model.attention_maps():
        assert attention.shape == (2, CONFIG.n_head, 9, 9)
        torch.testing.assert_close(attention.sum(-1), torch.ones(2, CONFIG.n_head, 9))
        assert float(attention.triu(diagonal=1).abs().max()) == 0.0


def test_head_is_tied_to_token_embedding():
    model = make_model()
    assert model.lm_head.weight.data_ptr() == model.wte.weight.data_ptr()


@pytest.mark.parametrize("config", [CONFIG, GPTConfig(vocab_size=43, block_size=32, n_layer=4, n_head=4, n_embd=128)])
def test_layer_costs_count_every_parameter(config):
    assert sum(c.params for c in layer_costs(config)) == make_model(config).num_params()


@pytest.mark.parametrize("seq_len", [1, 5, 16])
def test_layer_costs_matmul_flops_match_pytorch_flop_counter(seq_len):
    model = make_model()
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, seq_len, dtype=torch.long))
    counted = sum(c.flops for c in layer_costs(CONFIG, seq_len) if is_matmul(c))
    assert counted == counter.get_total_flops()


def test_matmuls_dominate_the_default_model():
    costs = layer_costs(GPTConfig())
    matmul = sum(c.flops for c in costs if is_matmul(c))
    assert matmul / sum(c.flops for c in costs) > 0.9


def test_config_rejects_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(n_embd=30, n_head=4)


def test_sequence_longer_than_the_context_is_refused():
    with pytest.raises(ValueError, match="block_size is 16"):
        make_model()(torch.zeros(1, 17, dtype=torch.long))


def test_prompt_longer_than_the_context_gets_a_clear_error():
    with pytest.raises(PromptTooLongError, match="context is 16 tokens"):
        ask(make_model(), tokenizer, "reverse abcdefghijklmnop")


def test_greedy_is_deterministic_and_sampling_is_seeded():
    model = make_model()
    assert ask(model, tokenizer, "12+5") == ask(model, tokenizer, "12+5")
    sampled = [ask(model, tokenizer, "12+5", temperature=1.0, seed=s) for s in range(4)]
    assert sampled == [ask(model, tokenizer, "12+5", temperature=1.0, seed=s) for s in range(4)]
    assert len(set(sampled)) > 1  # an untrained model at temperature 1 does not repeat itself
    assert ask(model, tokenizer, "12+5", temperature=1.0, top_k=1, seed=0) == ask(model, tokenizer, "12+5")


def test_batched_answers_equal_one_by_one_answers():
    model = make_model()
    prompts = ["1+2", "33-4", "sort 321", "9+9", "reverse ab"]
    assert ask_many(model, tokenizer, prompts) == [ask(model, tokenizer, p) for p in prompts]


def test_exact_match_is_strict():
    assert exact_match(["12", "3", "ab"], ["12", "30", "ab"]) == pytest.approx(2 / 3)
    assert exact_match([" 12"], ["12"]) == 0.0
    with pytest.raises(ValueError):
        exact_match(["1"], [])
