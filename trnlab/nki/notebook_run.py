"""Run a notebook written for a Neuron instance, unmodified: ``python -m trnlab.nki notebook LAB.ipynb``.

A course lab for Trainium (the Build on Trainium workshop's NKI lab, say) is a notebook that imports
``neuronxcc.nki`` / ``nki`` and, to call a kernel from PyTorch, ``torch_xla``. This runs it top to bottom in
a fresh kernel of this environment with the zero-edit hook (`zero_edit.py`) installed before its first cell,
as `run` does for a script, in the notebook's folder; every cell runs even after one fails. It prints one
line per code cell that failed (cell number, error) and, with ``-o OUT.ipynb``, saves the executed notebook.
The exit code is 0 when no cell failed, 1 otherwise.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

SETUP = "from trnlab.nki import zero_edit as _zero_edit\n_zero_edit.install({force})\ndel _zero_edit\n"


def run_notebook(path: str | Path, timeout: int = 600, force: bool | None = None):
    """Execute the notebook at `path` with AWS's NKI names served by trnlab; return (notebook with its
    outputs, [(code cell number from 1, "ErrorName: message")] of the cells that failed)."""
    from nbclient import NotebookClient
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    setup = nbformat.v4.new_code_cell(SETUP.format(force="" if force is None else f"force={force!r}"))
    nb.cells.insert(0, setup)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, record_timing=False,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    client.execute()
    nb.cells.pop(0)
    failed = []
    failed_setup = _error(setup)
    if failed_setup:
        failed.append((0, f"the zero-edit hook could not be installed: {failed_setup}"))
    number = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        number += 1
        error = _error(cell)
        if error:
            failed.append((number, error))
    return nb, failed


def _error(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {str(output.get('evalue'))[:300]}"
    return None


def main(argv: list[str], force: bool | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trnlab.nki notebook",
                                     description="Run a notebook written for a Neuron instance on trnlab, unmodified.")
    parser.add_argument("notebook", help="the .ipynb file")
    parser.add_argument("-o", "--out", help="save the executed notebook here")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)
    if not Path(args.notebook).is_file():
        parser.error(f"no notebook at {args.notebook}")
    nb, failed = run_notebook(args.notebook, args.timeout, force)
    code_cells = sum(c.cell_type == "code" for c in nb.cells)
    for number, error in failed:
        print(f"code cell {number}: {error}")
    print(f"{args.notebook}: {code_cells - len(failed)} of {code_cells} code cells ran without an error")
    if args.out:
        nbformat.write(nb, args.out)
    return 1 if failed else 0
