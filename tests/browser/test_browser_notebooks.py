"""Every course notebook runs in JupyterLab in headless Chromium: widgets render, no JavaScript
errors, nothing is fetched from the network, and opening a notebook does not mark it modified.

Opt-in, because it runs the whole course in a browser (several minutes on 2 cores): set
TRNLAB_BROWSER_TESTS=1. It also skips where Chromium (/usr/bin/chromium, from the system packages:
`apt-get install chromium`) or playwright is missing. `python tests/browser/check_notebooks.py` does
the same by hand, with screenshots.
"""

from __future__ import annotations

import sys
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_notebooks  # noqa: E402

pytestmark = check_notebooks.pytest_marks()


def test_every_notebook_runs_in_jupyterlab_in_a_browser(tmp_path, capsys):
    status = check_notebooks.main(["--shots", str(tmp_path)])
    report = capsys.readouterr().out
    assert status == 0, report
