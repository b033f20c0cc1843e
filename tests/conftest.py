"""Shared test set-up.

pytest runs with two xdist workers on a 2-core machine: one torch thread per worker keeps them from
fighting over the cores (two threads each made the suite several times slower).
"""

import matplotlib
import torch

matplotlib.use("Agg")  # no windows from plot tests
torch.set_num_threads(1)
