"""A small CNN trained on the simulated chip (every step's forward and backward compiled by
torch.compile(backend="trnlab")) on the generated stroke images reaches the stated accuracy."""
import pytest
import torch

import trnlab.compiler as tc
from trnlab.compiler import dynamo, zoo
from trnlab.data import images

ACCURACY = 0.90          # on 256 held-out images, after 30 Adam steps of 16 images (seed 1; eager reaches 0.96)


def test_strokes_are_deterministic_and_balanced():
    x, y = images.strokes(64, seed=3)
    x2, y2 = images.strokes(64, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2) and x.shape == (64, 1, 12, 12)
    assert torch.bincount(y).tolist() == [16] * 4


@pytest.mark.slow
def test_small_cnn_trained_on_the_simulated_chip_reaches_the_stated_accuracy():
    dynamo.register()
    torch._dynamo.reset()
    torch.manual_seed(1)
    model = zoo.SmallCNN()
    losses = images.train_cnn(model, steps=30, batch=16, lr=0.03, seed=1)
    torch._dynamo.reset()
    assert losses[-1] < 0.5 * losses[0]
    x, y = images.strokes(256, seed=999)
    compiled = tc.compile(model.eval(), (x,))                       # inference on the chip too
    assert images.accuracy(compiled(x), y) >= ACCURACY
