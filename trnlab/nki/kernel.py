"""A Jupyter kernel in which AWS's NKI names are trnlab's: open a Trainium course lab in JupyterLab unmodified.

    python -m trnlab.nki kernelspec            # once: installs "Python 3 (NKI on trnlab)" into this environment
    jupyter lab LAB.ipynb                      # then Kernel -> Change Kernel -> "Python 3 (NKI on trnlab)"

The kernel is ipykernel's, started by ``python -m trnlab.nki.kernel -f CONNECTION_FILE`` after the zero-edit
hook is installed (`zero_edit.py`), so a notebook's ``import neuronxcc.nki``, ``import nki`` and
``from torch_xla.core import xla_model`` are served by trnlab from its first cell on. Where a real AWS NKI
installation is importable the kernel does not start (the hook never shadows one unasked; `RealInstallationError`
names it, in the server's log).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

NAME = "trnlab-nki"
DISPLAY_NAME = "Python 3 (NKI on trnlab)"


def spec() -> dict:
    """The kernel.json of the kernel: this interpreter, this module."""
    return {"argv": [sys.executable, "-m", "trnlab.nki.kernel", "-f", "{connection_file}"],
            "display_name": DISPLAY_NAME, "language": "python", "metadata": {"debugger": True}}


def install(prefix: str | None = None, user: bool = False) -> str:
    """Install the kernelspec (into `prefix`'s share/jupyter/kernels, this environment's by default, or the
    user's with `user`); return the folder it went to."""
    from jupyter_client.kernelspec import KernelSpecManager
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "kernel.json").write_text(json.dumps(spec(), indent=1))
        return KernelSpecManager().install_kernel_spec(folder, NAME, user=user,
                                                       prefix=None if user else (prefix or sys.prefix))


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m trnlab.nki kernelspec",
                                     description=f"Install the Jupyter kernel {DISPLAY_NAME!r}.")
    parser.add_argument("--user", action="store_true", help="into the user's Jupyter folder, not this environment's")
    parser.add_argument("--prefix", help="into PREFIX/share/jupyter/kernels")
    args = parser.parse_args(argv)
    where = install(args.prefix, args.user)
    print(f"installed the kernel {DISPLAY_NAME!r} in {where}")
    return 0


if __name__ == "__main__":
    from trnlab.nki import zero_edit
    zero_edit.install()
    from ipykernel import kernelapp
    kernelapp.launch_new_instance()
