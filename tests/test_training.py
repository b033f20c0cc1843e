"""Reference training: the loss goes down, runs are reproducible, checkpoints round-trip exactly."""

from __future__ import annotations

import json

import pytest
import torch

from trnlab.data import CorpusConfig, write_corpus
from trnlab.model import TrainConfig, learning_rate_at, load_checkpoint, load_train_log, train

TINY = TrainConfig(steps=40, batch_size=32, learning_rate=3e-3, warmup_steps=5, eval_interval=20,
                   n_layer=1, n_head=2, n_embd=32, seed=1)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    write_corpus(directory, CorpusConfig(seed=5, train_per_task=200, val_per_task=10, test_per_task=10))
    return directory


@pytest.fixture(scope="module")
def trained(corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("checkpoint")
    return train(TINY, corpus_dir, out_dir=out, progress=False), out


def test_a_short_run_lowers_the_loss(trained):
    result, _ = trained
    first, last = sum(result.train_loss[:5]) / 5, sum(result.train_loss[-5:]) / 5
    assert last < 0.8 * first
    assert result.val_steps == [20, 40] and result.val_loss[1] < result.val_loss[0]


def test_two_runs_with_one_seed_give_the_same_losses(trained, corpus_dir):
    again = train(TINY, corpus_dir, progress=False, evaluate_test=False)
    assert again.train_loss == trained[0].train_loss


def test_a_different_seed_gives_different_losses(trained, corpus_dir):
    other = train(TrainConfig(**{**TINY.__dict__, "seed": 2}), corpus_dir, progress=False, evaluate_test=False)
    assert other.train_loss != trained[0].train_loss


def test_test_accuracy_is_reported_per_task(trained):
    accuracy = trained[0].test_accuracy
    assert set(accuracy) == {"add", "sub", "reverse", "sort"}
    assert all(0.0 <= a <= 1.0 for a in accuracy.values())


def test_checkpoint_round_trip_gives_identical_logits(trained):
    result, out = trained
    model, tokenizer = load_checkpoint(out)
    assert tokenizer == result.tokenizer and model.config == result.model.config
    idx = torch.tensor([tokenizer.encode_example("123+45", "168")])
    torch.testing.assert_close(model(idx)[0], result.model(idx)[0], rtol=0, atol=0)


def test_checkpoint_files_hold_no_pickle(trained):
    _, out = trained
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "train_log.json"]
    assert json.loads((out / "config.json").read_text())["model"]["n_embd"] == 32
    log = load_train_log(out)
    assert len(log["train_loss"]) == TINY.steps and log["train_config"]["seed"] == 1


def test_missing_checkpoint_error_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m trnlab train"):
        load_checkpoint(tmp_path)


def test_learning_rate_warms_up_then_decays_along_a_cosine():
    config = TrainConfig(steps=1000, warmup_steps=100, learning_rate=1e-3, min_lr=1e-4)
    rates = [learning_rate_at(s, config) for s in range(config.steps)]
    assert rates[0] == pytest.approx(1e-5) and rates[99] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(rates[100:], rates[101:]))
    assert rates[550] == pytest.approx((1e-3 + 1e-4) / 2)  # halfway through the decay
    assert learning_rate_at(config.steps, config) == pytest.approx(1e-4)
