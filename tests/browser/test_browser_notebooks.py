"""Every course notebook runs in JupyterLab in headless Chromium: widgets render, no JavaScript
errors, nothing is fetched from the network, and opening a notebook does not mark it modified.

Skips where Chromium (/usr/bin/chromium, from the system packages) or playwright is missing, as on CI.
Runs the whole course (a few minutes): `python tests/browser/check_notebooks.py` does the same by hand.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_notebooks  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not check_notebooks.CHROMIUM.exists(), reason=f"no Chromium at {check_notebooks.CHROMIUM}"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="playwright is not installed"),
]


def test_every_notebook_runs_in_jupyterlab_in_a_browser(tmp_path, capsys):
    status = check_notebooks.main(["--shots", str(tmp_path)])
    report = capsys.readouterr().out
    assert status == 0, report
