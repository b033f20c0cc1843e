"""Notebook 05's "AWS's production kernels" data (notebooks/data/nki_library_cumsum.json, made by
benchmarks/nki_library_example.py from AWS's NKI Library): its programs replay on a 2-core trn2
device without the library, compute a cumulative sum, and give the figures stored beside them."""
import json
from pathlib import Path

import numpy as np
import pytest

from trnlab.hardware.device import Device
from trnlab.hardware.program import Program
from trnlab.nki.qor import QOR_METRICS, qor

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data" / "nki_library_cumsum.json"


@pytest.fixture(scope="module")
def doc():
    return json.loads(DATA.read_text())


def test_the_saved_programs_replay_to_a_cumulative_sum(doc):
    programs = [Program.from_json(p) for p in doc["programs"]]
    np.random.seed(doc["input"]["numpy_seed"])
    x = np.random.randn(*doc["input"]["shape"]).astype(np.float32)
    launch = Device(doc["target"], mode="full", cores=doc["lnc"]).run_spmd(programs, x)
    (out,) = launch.outputs if isinstance(launch.outputs, (list, tuple)) else (launch.outputs,)
    rtol, atol = doc["vs_reference"]["rtol"], doc["vs_reference"]["atol"]
    np.testing.assert_allclose(out, np.cumsum(x.astype(np.float64), axis=-1), rtol=rtol, atol=atol)
    assert doc["vs_reference"]["passes"]
    metrics = qor(launch)
    assert set(metrics) == set(QOR_METRICS)
    # the figures shown beside the timeline stay those of the replay (within a recalibration's reach)
    assert launch.latency_ns / 1e3 == pytest.approx(doc["latency_us"], rel=0.25)
    assert metrics["MbuEstimatedPercent"] == pytest.approx(doc["qor"]["MbuEstimatedPercent"], rel=0.25)


def test_the_data_holds_no_kernel_source_text(doc):
    """Only line numbers and the kernel file's library path: AWS's code stays in AWS's repository."""
    for program in doc["programs"]:
        for ins in program["instructions"]:
            file, line, function = ins["source"]["tuple"]          # (file, line, function)
            assert file.startswith("nkilib/") and isinstance(line, int) and function.isidentifier()
