"""The NumPy-only core (`hardware`, `nki`, `kernels`) on the oldest and newest Python that
pyproject.toml's `requires-python` admits, in a venv holding only NumPy, ml_dtypes, pytest and
hypothesis (the versions requirements.txt pins): no torch, no matplotlib, no Jupyter.

The venvs are built once under the system's temporary folder (`trnlab-core-venvs/`, keyed by the
interpreter and the pins) and reused, so a second run only runs the tests. A Python that is not on
this machine is skipped, with the path that was looked for. The core's tests are the `hardware`,
`nki`, `kernels`, program, schedule and loop-tracing test files that do not import torch; they run
with `--noconftest` (tests/conftest.py sets up torch).
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PINNED = ("numpy", "ml_dtypes", "pytest", "hypothesis")
# Left out, with the reason (they are run by the main test run, on the main Python):
NEEDS_ERF = [   # erf (GELU) comes from SciPy or PyTorch (trnlab/hardware/ops.py): NumPy has none
    "tests/test_hardware_schedule.py::test_timing_mode_gives_the_same_timeline_as_full_mode",
    "tests/test_kernels_workload.py::test_timing_only_schedule_equals_the_full_run",
]
NEEDS_STAMPING = [   # loop stamping runs on CPython 3.11 only (nki/loops.py); elsewhere loops are concrete
    "tests/test_hardware_allocate_bump.py"
    "::test_the_stamper_notes_its_tiles_and_allocation_reads_the_same_rows_from_them",
]
CORE_TESTS = ("test_hardware_*.py", "test_nki_*.py", "test_kernels_*.py", "test_trace_loops*.py", "test_program.py",
              "test_schedule_list.py", "test_systolic.py", "test_double_row_kernel_costs.py")


def supported_versions() -> tuple[tuple[int, int], tuple[int, int]]:
    """(oldest, newest) minor versions of `requires-python = ">=3.A,<3.B"` in pyproject.toml."""
    text = (REPO / "pyproject.toml").read_text()
    found = re.search(r'requires-python\s*=\s*">=3\.(\d+),\s*<3\.(\d+)"', text)
    assert found, "pyproject.toml: requires-python must read \">=3.A,<3.B\" (the versions the tests run on)"
    return (3, int(found.group(1))), (3, int(found.group(2)) - 1)


def pins() -> list[str]:
    """The requirements.txt lines of the core's dependencies, e.g. 'numpy==2.4.6'."""
    lines = (REPO / "requirements.txt").read_text().splitlines()
    out = [ln.split("#")[0].strip() for ln in lines if ln.split("==")[0].strip() in PINNED]
    assert len(out) == len(PINNED), f"requirements.txt pins {out}, expected {PINNED}"
    return out


def interpreter(version: tuple[int, int]) -> str | None:
    """A working CPython of this minor version: the running one, a pyenv install, or pythonX.Y on
    PATH (each asked for its version: a pyenv shim may name one that is not installed)."""
    if sys.version_info[:2] == version:
        return sys.executable
    root = os.path.expanduser(os.environ.get("PYENV_ROOT", "~/.pyenv"))
    candidates = sorted(glob.glob(os.path.join(root, "versions", f"{version[0]}.{version[1]}.*", "bin", "python")))
    candidates = candidates[::-1] + [shutil.which(f"python{version[0]}.{version[1]}")]
    for python in filter(None, candidates):
        asked = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                               text=True, timeout=60)
        if asked.returncode == 0 and tuple(map(int, asked.stdout.split())) == version:
            return python
    return None


def core_test_files() -> list[str]:
    files = sorted({p for pattern in CORE_TESTS for p in (REPO / "tests").glob(pattern)})
    return [str(p.relative_to(REPO)) for p in files if "torch" not in p.read_text()]


def venv_for(python: str, version: tuple[int, int]) -> Path:
    """A venv of `python` with the pinned core dependencies only (built once, then reused)."""
    key = hashlib.sha256(" ".join([python] + pins()).encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / "trnlab-core-venvs" / f"py{version[0]}.{version[1]}-{key}"
    bin_python = home / "bin" / "python"
    if (home / "ready").exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(home)], check=True, timeout=300)
    pip = subprocess.run([str(bin_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins()],
                         capture_output=True, text=True, timeout=600)
    if pip.returncode != 0:             # no package index here (offline): nothing to test against
        pytest.skip(f"could not install {pins()} into a Python {version[0]}.{version[1]} venv: "
                    f"{pip.stderr.strip().splitlines()[-1:]}")
    (home / "ready").write_text("\n".join(pins()) + "\n")
    return home


def test_requires_python_names_the_versions_tested_here():
    oldest, newest = supported_versions()
    assert oldest <= sys.version_info[:2] <= newest, "the main test run's Python is outside requires-python"
    assert oldest < newest
    readme = (REPO / "README.md").read_text()
    assert f"Python {oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}." in readme, "README.md names other versions"


@pytest.mark.slow
@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_the_numpy_only_core_passes_its_tests_without_torch(which):
    version = supported_versions()[0 if which == "oldest" else 1]
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} here (looked for python{version[0]}.{version[1]} on "
                    f"PATH and ~/.pyenv/versions/{version[0]}.{version[1]}.*)")
    home = venv_for(python, version)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRNLAB_"))}
    env["PYTHONPATH"] = str(REPO)
    check = ("import sys, trnlab.hardware, trnlab.nki, trnlab.nki.isa, trnlab.nki.language, trnlab.kernels; "
             "heavy = sorted(m for m in ('torch', 'matplotlib', 'IPython') if m in sys.modules); "
             "assert not heavy, f'the core imported {heavy}'")
    subprocess.run([str(home / "bin" / "python"), "-c", check], cwd=REPO, env=env, check=True, timeout=120)
    left_out = NEEDS_ERF + (NEEDS_STAMPING if version != (3, 11) else [])
    done = subprocess.run([str(home / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--noconftest", "-o", "addopts=", *core_test_files(),
                           *[f"--deselect={node}" for node in left_out]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, \
        f"Python {version}: the core's tests failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
