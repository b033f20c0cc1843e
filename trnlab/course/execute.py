"""Re-execute notebooks in place so that their stored outputs match the code.

    python -m trnlab.course execute                   # every notebook in notebooks/
    python -m trnlab.course execute notebooks/03_*.ipynb

Each notebook runs top to bottom in a fresh kernel from the current environment, with
``notebooks/`` as the working directory (as under ``jupyter lab notebooks/`` and nbval), and is
saved with its outputs. Run it whenever the code a notebook shows changes.

The stored metadata is what JupyterLab itself writes for the kernel (the kernelspec's display name,
e.g. "Python 3 (ipykernel)", and the ``language_info`` the kernel reports), so that opening a
notebook in JupyterLab does not mark it modified.

A widget cannot render in a notebook that has not run yet (JupyterLab renders widget views only for
trusted, i.e. freshly produced, outputs) and falls back to the output's text — for ipywidgets an
unreadable repr such as ``interactive(children=(IntSlider(...``. The stored text says instead what
to do: ``WIDGET_PLACEHOLDER``.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from trnlab import NOTEBOOKS_DIR
from trnlab.course.quiet_widgets import QuietOutputWidgets


KERNEL_NAME = "python3"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_PLACEHOLDER = "[an interactive widget: run the notebook (Run → Run All Cells) to use it]"


def kernelspec_metadata(kernel_name: str = KERNEL_NAME) -> dict:
    """The notebook's ``kernelspec`` as JupyterLab writes it: from the installed kernel spec."""
    spec = KernelSpecManager().get_kernel_spec(kernel_name)
    return {"display_name": spec.display_name, "language": spec.language, "name": kernel_name}


def replace_widget_reprs(nb) -> int:
    """Give every widget output the placeholder text instead of the widget's repr; return how many."""
    replaced = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                data["text/plain"] = WIDGET_PLACEHOLDER
                replaced += 1
    return replaced


class _Client(QuietOutputWidgets, NotebookClient):
    """nbclient without its Output-widget message race (quiet_widgets.py)."""


def execute_notebook(path: Path, timeout: int = 600) -> float:
    """Execute one notebook in place; return the wall time in seconds."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = _Client(
        nb, timeout=timeout, kernel_name=KERNEL_NAME, record_timing=False,  # no timestamps: diffs show only real changes
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # timestamps left by earlier runs
    nb.metadata["kernelspec"] = kernelspec_metadata()  # language_info: nbclient stores the kernel's own
    replace_widget_reprs(nb)
    nbformat.write(nb, path)
    return elapsed


def main(paths: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m trnlab.course execute",
                                     description="Re-execute notebooks in place so that their stored outputs "
                                                 "match the code (every notebook in notebooks/ by default).")
    parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="the .ipynb files to execute")
    args = parser.parse_args(paths)
    for p in args.notebooks:
        if not Path(p).is_file():
            parser.error(f"no notebook at {p}")
    notebooks = [Path(p) for p in args.notebooks] or sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    for path in notebooks:
        seconds = execute_notebook(path)
        size = path.stat().st_size / 1e6
        print(f"{path.name}: executed in {seconds:.1f} s, {size:.2f} MB stored")
    return 0
