"""The pictures of notebooks 00–02 draw without error and show what they claim."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from trnlab.data import CharTokenizer, encode_examples, make_corpus, CorpusConfig
from trnlab.model import GPT, GPTConfig, layer_costs
from trnlab.viz import model_viz


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_chain_highlights_the_named_stage():
    fig = model_viz.plot_chain(highlight=["training data"])
    colours = {p.get_facecolor() for p in fig.axes[0].patches if hasattr(p, "get_boxstyle")}
    assert len(colours) == 2  # highlighted and plain


def test_batch_picture_shows_inputs_and_targets():
    tokenizer = CharTokenizer()
    x, y = encode_examples(make_corpus(CorpusConfig(train_per_task=5, val_per_task=1, test_per_task=1))["train"], tokenizer)
    fig = model_viz.plot_batch(x, y, tokenizer, rows=6)
    assert len(fig.axes) == 2
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("B") == 6  # one <bos> per row


def test_layer_cost_plot_reports_the_matmul_share():
    costs = layer_costs(GPTConfig())
    fig = model_viz.plot_layer_costs(costs)
    assert "% in matrix multiplications" in fig.axes[0].get_title()
    assert len(fig.axes[0].patches) == len(costs)
    model_viz.plot_flops_by_kind(costs)


def test_architecture_loss_accuracy_and_attention_plots():
    config = GPTConfig(n_layer=2, n_embd=32, n_head=2)
    model_viz.plot_architecture(config)
    fig = model_viz.plot_loss_curve(list(np.linspace(3, 0.1, 100)), [50, 100], [1.0, 0.2])
    assert len(fig.axes[0].lines) == 3
    model_viz.plot_accuracy({"add": 0.97, "sub": 0.95})
    model = GPT(GPTConfig(n_layer=1, n_embd=32, n_head=2)).eval()
    model(torch.zeros(1, 6, dtype=torch.long), keep_attention=True)
    fig = model_viz.plot_attention(model.attention_maps()[0][0, 1], list("abcdef"))
    assert fig.axes[0].images[0].get_array().mask[0, 1]  # the future is masked out
