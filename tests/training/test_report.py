"""The training report: the program's FLOPs against 6·N·tokens, phase shares, the cost per generation."""
import pytest

from trnlab.training import AdamWConfig, compile_train_step
from trnlab.training.report import (checkpoint_recipe, estimate_training, flops_check, matmul_params,
                                    textbook_flops)
from trnlab.training.run import tiny_config, tiny_model, train_batches


@pytest.fixture(scope="module")
def step():
    return compile_train_step(tiny_model(seed=0), train_batches(1, 4, 0)[0], optimizer=AdamWConfig())


def test_matmul_params_count_every_weight_matrix_and_the_tied_head_once():
    config = tiny_config()
    C, V = config.n_embd, config.vocab_size
    assert matmul_params(config) == 12 * C * C + V * C


def test_program_flops_agree_with_6_n_tokens_plus_attention(step):
    check = flops_check(step, tiny_config(), step.simulate())
    # the program adds only row sums (bias and embedding gradients, the loss) to the textbook count
    assert 1.0 <= check["ratio"] < 1.15, check
    assert check["tokens"] == 4 * 24
    # the backward does twice the forward's matmul work
    assert check["by_phase"]["backward"] / check["by_phase"]["forward"] == pytest.approx(2.0, rel=0.1)


def test_textbook_flops_scale_with_tokens():
    a, b = textbook_flops(tiny_config(), 4, 24), textbook_flops(tiny_config(), 8, 24)
    assert b["6ND"] == 2 * a["6ND"] and b["attention"] == 2 * a["attention"]


def test_estimate_per_generation_from_the_simulated_step(step):
    recipe = checkpoint_recipe()
    assert recipe["steps"] == 4000 and recipe["batch_size"] == 64
    rows = estimate_training(step, steps=10, batch_size=8, targets=("trn1", "trn2"))
    trn1, trn2 = rows
    assert trn1.micro_steps == 20
    assert trn2.step_us < trn1.step_us                 # a newer core runs the same program faster
    assert trn2.core_hours == pytest.approx(20 * trn2.step_us * 1e-6 / 3600)
    assert trn2.usd == pytest.approx(trn2.core_hours * trn2.usd_per_core_hour)
    assert sum(trn2.shares.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="micro-batch"):
        estimate_training(step, steps=1, batch_size=6)
