"""A course lab written for a Neuron instance runs here unmodified: a notebook that imports beta 1's
``neuronxcc.nki``, calls its kernels with NumPy arrays and, through ``torch_xla``'s device calls, with
PyTorch tensors, run by ``python -m trnlab.nki notebook`` and in the Jupyter kernel "Python 3 (NKI on
trnlab)". The lab here is our own, in the style of the Build on Trainium workshop's NKI lab (docs/nki_compat.md
records that lab's own run)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np

from trnlab.nki import kernel as nki_kernel
from test_nki_zero_edit import hook  # noqa: F401  (the fixture: the hook installed for one test)

ROOT = Path(__file__).resolve().parents[1]

CELLS = [
    "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl",
    '''@nki.jit
def scaled_sum(a_input, b_input):
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    a_tile = nl.load(a_input)
    b_tile = nl.load(b_input)
    nl.store(out, value=a_tile + 2 * b_tile)
    return out''',
    '''a = np.random.default_rng(0).random((128, 256)).astype(np.float16)
b = np.random.default_rng(1).random((128, 256)).astype(np.float16)
print("numpy:", "match" if np.allclose(scaled_sum(a, b), a + 2 * b, rtol=1e-2, atol=1e-3) else "differ")''',
    '''import torch
from torch_xla.core import xla_model as xm
device = xm.xla_device()
torch.manual_seed(0)
lhs = torch.rand((64, 128), dtype=torch.bfloat16, device=device)
rhs = torch.rand((128, 256), dtype=torch.bfloat16, device=device)''',
    '''@nki.jit
def matmul_small(lhsT, rhs):
    result = nl.ndarray((64, 256), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    j_p, j_f = nl.mgrid[0:128, 0:256]
    lhs_tile = nl.load(lhsT[i_p, i_f])
    rhs_tile = nl.load(rhs[j_p, j_f])
    psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
    nl.store(result, value=nl.copy(psum, dtype=result.dtype))
    return result''',
    '''out = matmul_small(lhs.T, rhs)
xm.mark_step()
print("torch:", type(out).__name__, out.dtype, "match" if torch.allclose(torch.matmul(lhs, rhs), out, rtol=1e-2, atol=1e-4) else "differ")''',
]


def _lab(path: Path, cells=CELLS) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A lab written for a trn1 instance")] + \
        [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)
    return path


def _environment() -> dict:
    environment = {k: v for k, v in os.environ.items() if k != "TRNLAB_NKI_FORCE"}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    return environment


def _printed(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_the_notebook_command_runs_a_lab_for_a_neuron_instance_unmodified(tmp_path):
    lab = _lab(tmp_path / "lab.ipynb")
    done = subprocess.run([sys.executable, "-m", "trnlab.nki", "notebook", str(lab), "-o", str(tmp_path / "ran.ipynb")],
                          capture_output=True, text=True, timeout=300, env=_environment(), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 of 6 code cells ran without an error" in done.stdout
    printed = _printed(nbformat.read(tmp_path / "ran.ipynb", as_version=4))
    assert "numpy: match" in printed and "torch: Tensor torch.bfloat16 match" in printed


def test_the_notebook_command_names_each_failing_cell_and_exits_1(tmp_path):
    lab = _lab(tmp_path / "lab.ipynb", CELLS[:1] + ["import neuronxcc.nki.no_such_module", "print('still runs')"])
    done = subprocess.run([sys.executable, "-m", "trnlab.nki", "notebook", str(lab)], capture_output=True, text=True,
                          timeout=300, env=_environment(), cwd=tmp_path)
    assert done.returncode == 1
    assert "code cell 2: ModuleNotFoundError" in done.stdout and "2 of 3 code cells ran without an error" in done.stdout


def test_the_jupyter_kernel_serves_aws_names_from_its_first_cell(tmp_path):
    from nbclient import NotebookClient
    where = nki_kernel.install(prefix=str(tmp_path / "prefix"))
    spec = json.loads((Path(where) / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "trnlab.nki.kernel"] and spec["display_name"] == nki_kernel.DISPLAY_NAME
    nb = nbformat.read(_lab(tmp_path / "lab.ipynb"), as_version=4)
    environment = _environment()
    environment["JUPYTER_PATH"] = str(tmp_path / "prefix" / "share" / "jupyter")
    old = dict(os.environ)
    os.environ.update(environment)
    try:
        NotebookClient(nb, kernel_name=nki_kernel.NAME, timeout=300).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert "numpy: match" in _printed(nb) and "torch: Tensor torch.bfloat16 match" in _printed(nb)


def test_torch_xla_device_calls_are_the_host_and_a_kernel_takes_and_returns_its_tensors(hook):
    import torch
    import torch_xla
    from torch_xla.core import xla_model as xm
    assert xm.xla_device() == torch_xla.device() == torch.device("cpu") and xm.xla_device_hw(xm.xla_device()) == "NEURON"
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def negate(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.negative(nl.load(x)))
        return out
    x = torch.arange(128 * 64, dtype=torch.float32).reshape(64, 128).to(xm.xla_device())
    out = negate(x.T)                                     # a transposed view, as the labs pass lhs.T
    assert isinstance(out, torch.Tensor)
    np.testing.assert_array_equal(out.numpy(), -x.T.numpy())


def test_a_real_torch_xla_is_left_alone(tmp_path):
    site = tmp_path / "site" / "torch_xla"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("WHO = 'real'\n")
    code = ("from trnlab.nki import zero_edit; zero_edit.install(); import torch_xla; print(torch_xla.WHO)")
    environment = _environment()
    environment["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), environment["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environment)
    assert done.stdout.strip() == "real", done.stderr


def test_a_script_calling_a_kernel_from_pytorch_on_the_xla_device_runs_unmodified(tmp_path):
    # the shape of AWS's getting-started PyTorch example: `torch_xla.device()`, tensors moved there, the kernel called
    script = tmp_path / "add_on_device.py"
    script.write_text(
        "import nki\nimport nki.language as nl\n\n\n@nki.jit\ndef add(a, b):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))\n    return out\n\n\n"
        "if __name__ == '__main__':\n    import torch\n    import torch_xla\n    device = torch_xla.device()\n"
        "    a = torch.ones((4, 3), dtype=torch.float16).to(device=device)\n"
        "    print(add(a, a).tolist())\n")
    done = subprocess.run([sys.executable, "-m", "trnlab.nki", "run", str(script)], capture_output=True, text=True,
                          timeout=120, env=_environment(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([[2.0] * 3] * 4)
