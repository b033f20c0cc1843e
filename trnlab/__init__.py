"""trnlab: follow a tiny language model from training data, through PyTorch and a Neuron-like
compiler, onto a simulated AWS Trainium, and out again as a deployed model.

One sub-package per stage of the chain. The layers, bottom to top (a package imports only the ones
below it: docs/architecture.md, tests/test_layering.py):

    config < data < model < hardware < nki < kernels < compiler < runtime < economics < training
           < distributed < serve < viz < course < cli

`viz` draws every picture the notebooks show, `course` checks and grades the exercises, `cli` is
the command line (`python -m trnlab`). This module imports nothing of trnlab.
"""

from pathlib import Path

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
