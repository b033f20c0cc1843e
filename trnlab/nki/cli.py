"""The `python -m trnlab.nki` command line: AWS's NKI scripts, tests and profiles, unmodified.

    run SCRIPT [ARGS...]        run a script that imports nki / neuronxcc.nki as on AWS's simulator
                                (``NKI_SIMULATOR=1 python SCRIPT``): __name__ == "__main__", sys.argv set
    run -m MODULE [ARGS...]     the same for a module (``python -m MODULE``)
    pytest [PYTEST ARGS...]     pytest in this process, the hook installed before collection
    notebook LAB.ipynb [-o OUT] a notebook written for a Neuron instance, run top to bottom in a fresh
                                kernel with the hook installed (torch_xla's device calls served too)
    kernelspec [--user]         install the Jupyter kernel "Python 3 (NKI on trnlab)": the same in JupyterLab
    profile FILE.neff [...]     the `neuron-profile view --output-format summary-text` fields of a
                                program saved by nki.benchmark(save_neff_name=...) (profile_summary.py)

``--force`` (before the command) serves AWS's names even if a real nki / neuronxcc is installed
(trnlab.nki.zero_edit). The hook maps the names; everything else is the kernel's own code.
"""
from __future__ import annotations

import os
import runpy
import sys

USAGE = __doc__.split("\n\n")[1]


def run_main(argv: list[str]) -> int:
    """Run a script (or `-m module`) as __main__ with the zero-edit hook installed."""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m trnlab.nki run SCRIPT [ARGS...] | run -m MODULE [ARGS...]")
        return 0 if argv else 2
    if argv[0] == "-m":
        if len(argv) < 2:
            print("python -m trnlab.nki run -m: a module name is needed", file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]
        sys.path.insert(0, os.getcwd())
        return _exit_code(lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True))
    script = argv[0]
    if not os.path.isfile(script):
        print(f"python -m trnlab.nki run: no script {script!r}", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))   # as `python script.py` does
    return _exit_code(lambda: runpy.run_path(script, run_name="__main__"))


def _exit_code(call) -> int:
    try:
        call()
    except SystemExit as stop:                 # the script's own sys.exit(code)
        code = stop.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


def pytest_main(argv: list[str]) -> int:
    """pytest in-process: the hook is installed before pytest imports any conftest or test. The
    hook is also named as a plugin (``-p trnlab.nki.zero_edit``) so that pytest-xdist's workers,
    which get the same arguments, install it too."""
    import pytest
    argv = list(argv)
    if "trnlab.nki.zero_edit" not in argv:
        argv = ["-p", "trnlab.nki.zero_edit"] + argv
    return int(pytest.main(argv))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    force = None
    while argv and argv[0].startswith("--") and argv[0] != "--help":
        option = argv.pop(0)
        if option != "--force":
            print(f"python -m trnlab.nki: unknown option {option!r}\n{USAGE}", file=sys.stderr)
            return 2
        force = True
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(f"usage: python -m trnlab.nki [--force] COMMAND ...\n\n{USAGE}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "profile":
        from trnlab.nki.profile_summary import main as profile_main
        return profile_main(rest)
    if command == "kernelspec":
        from trnlab.nki.kernel import main as kernelspec_main
        return kernelspec_main(rest)
    if command == "notebook":                         # the hook goes into the notebook's own kernel
        from trnlab.nki.notebook_run import main as notebook_main
        return notebook_main(rest, force)
    if command not in ("run", "pytest"):
        print(f"python -m trnlab.nki: unknown command {command!r}\n{USAGE}", file=sys.stderr)
        return 2
    from trnlab.nki import zero_edit
    if force:
        os.environ["TRNLAB_NKI_FORCE"] = "1"          # for the processes it starts (pytest-xdist workers)
    try:
        zero_edit.install(force=force)
    except zero_edit.RealInstallationError as error:
        print(f"python -m trnlab.nki {command}: {error}", file=sys.stderr)
        return 3
    return run_main(rest) if command == "run" else pytest_main(rest)
