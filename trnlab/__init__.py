"""trnlab: follow a tiny language model from training data, through PyTorch and a Neuron-like
compiler, onto a simulated AWS Trainium, and out again as a deployed model.

One sub-package per stage of the chain; data flows one way, top to bottom:

    data → model → hardware → nki → kernels → compiler → runtime → distributed → serve

`viz` draws every picture the notebooks show and `course` checks and grades the exercises.
"""

from pathlib import Path

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
