"""A lab notebook written for a Neuron instance runs in JupyterLab, in headless Chromium, on the kernel
"Python 3 (NKI on trnlab)" (`trnlab/nki/kernel.py`): its ``neuronxcc.nki`` and ``torch_xla`` imports served
from the first cell, its NumPy and PyTorch checks passing, nothing fetched from the network.

Opt-in like the course's browser check (TRNLAB_BROWSER_TESTS=1; Chromium and playwright needed). The lab is
our own, in the style of the Build on Trainium workshop's NKI lab (tests/test_nki_zero_edit_labs.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import check_notebooks  # noqa: E402

pytestmark = check_notebooks.pytest_marks()


def test_a_lab_for_a_neuron_instance_runs_on_the_nki_kernel_in_jupyterlab(tmp_path, monkeypatch):
    from playwright.sync_api import sync_playwright
    from test_nki_zero_edit_labs import CELLS
    from trnlab.nki import kernel as nki_kernel
    root = tmp_path / "labs"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    # the kernel a student picked (Kernel -> Change Kernel), as JupyterLab saves it
    nb.metadata["kernelspec"] = {"name": nki_kernel.NAME, "display_name": nki_kernel.DISPLAY_NAME, "language": "python"}
    nbformat.write(nb, root / "lab.ipynb")
    nki_kernel.install(prefix=str(tmp_path / "prefix"))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    lab = check_notebooks.JupyterLab(root, tmp_path)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(check_notebooks.CHROMIUM), args=check_notebooks.CHROMIUM_ARGS)
            context = browser.new_context()
            outside = check_notebooks.offline(context, lab.base)
            page = context.new_page()
            page.goto(f"{lab.base}/lab/tree/lab.ipynb?token={lab.token}&reset")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            check_notebooks.wait_kernel_idle(page, 120)
            page.wait_for_timeout(5000)          # as the course check: JupyterLab settles before Run All
            check_notebooks.run_all(page)
            check_notebooks.wait_all_ran(page, len(CELLS), 300)
            check_notebooks.wait_kernel_idle(page, 60)
            text = page.evaluate(check_notebooks.OUTPUT_TEXT)
            kernels = [k["name"] for k in lab.api("/api/kernels") or []]
            browser.close()
    finally:
        lab.stop()
    assert kernels == [nki_kernel.NAME]
    assert "numpy: match" in text and "torch: Tensor torch.bfloat16 match" in text, text
    assert "Error" not in text and not outside
