"""A small image dataset generated in the repository: strokes on a 12x12 canvas, four classes.

Each image is one stroke — a horizontal bar, a vertical bar, a diagonal or an anti-diagonal — of random
length and position, with Gaussian noise; the label is the stroke's direction. A convolution sees it
at once (an edge filter per direction), a linear model on the raw pixels struggles with the random
positions. Generated from a seed (NumPy's PCG64), so every machine makes the same images; nothing is
downloaded. The CNN of `trnlab.compiler.zoo.SmallCNN` trains on it on the simulated chip
(`train_cnn`; tests/compiler/test_zoo_cnn_training.py, notebook 06).
"""
from __future__ import annotations

import numpy as np
import torch

SIZE = 12
CLASSES = ("horizontal", "vertical", "diagonal", "anti-diagonal")


def strokes(n: int, seed: int = 0, noise: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """(images [n, 1, 12, 12] float32, labels [n] int64), balanced over the four classes."""
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, noise, size=(n, SIZE, SIZE)).astype(np.float32)
    labels = np.arange(n) % len(CLASSES)
    rng.shuffle(labels)
    for i, label in enumerate(labels):
        length = int(rng.integers(5, 10))
        r, c = (int(v) for v in rng.integers(0, SIZE - length + 1, size=2))
        fixed = int(rng.integers(0, SIZE))
        steps = np.arange(length)
        if label == 0:
            rows, cols = np.full(length, fixed), c + steps
        elif label == 1:
            rows, cols = r + steps, np.full(length, fixed)
        elif label == 2:
            rows, cols = r + steps, c + steps
        else:
            rows, cols = r + steps, c + length - 1 - steps
        images[i, rows, cols] += 1.0
    return torch.from_numpy(images[:, None]), torch.from_numpy(labels.astype(np.int64))


def train_cnn(model: torch.nn.Module, steps: int = 30, batch: int = 16, lr: float = 0.03, seed: int = 0,
              backend: str = "trnlab") -> list[float]:
    """Adam on fresh batches of `strokes`, every step's forward and backward compiled by
    `torch.compile(backend=backend)` (the simulated chip for "trnlab"); returns the losses."""
    import torch.nn.functional as F
    step_model = torch.compile(model, backend=backend) if backend else model
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = strokes(batch, seed=seed * 100_003 + step + 1)
        loss = F.cross_entropy(step_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float((torch.as_tensor(logits).argmax(-1) == labels).float().mean())
