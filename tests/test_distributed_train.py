"""The real multi-process run: 2 processes over torch.distributed (gloo) give the 1-process losses,
and a rank that dies or hangs makes the job fail with a message, never hang.

Kept short (1 layer, 3 steps, 2,000 training examples): the equality test starts torchrun and runs
the 1-process job in the test's own process meanwhile (measured 43 s on a busy shared 2-core
machine; the two failure tests about 30 s each). Tolerance: 1e-5 relative per step — the two runs
add the same per-token losses and gradients in another order (two shards, then the all-reduce), so
they agree to float rounding.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from trnlab.distributed import train

SMALL = ["--steps", "3", "--global-batch", "8", "--seed", "3", "--n-layer", "1", "--n-embd", "32",
         "--train-examples", "2000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None), env.pop("RANK", None)
    return env


def _torchrun(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr", "127.0.0.1",
               "--master-port", str(_free_port()), "--monitor-interval", "0.5", "-m", "trnlab.distributed.train", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env())


def test_two_processes_give_the_losses_of_one_process_on_the_same_global_batch(tmp_path, monkeypatch):
    two = train.launch(2, [*SMALL, "--out", str(tmp_path / "p2")])  # torchrun, as from a shell
    # meanwhile the 1-process run: the same module without torchrun (here in the test's own process)
    for name in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    assert train.main([*SMALL, "--out", str(tmp_path / "p1")]) == 0
    _, stderr = two.communicate(timeout=120)
    assert two.returncode == 0, stderr[-2000:]
    a = json.loads((tmp_path / "p1" / "losses.json").read_text())
    b = json.loads((tmp_path / "p2" / "losses.json").read_text())
    assert (a["world_size"], b["world_size"]) == (1, 2)
    assert len(a["losses"]) == len(b["losses"]) == 3
    assert b["losses"] == pytest.approx(a["losses"], rel=1e-5)
    assert a["losses"][0] != a["losses"][-1]  # it trained: the loss moved


def test_a_rank_that_dies_fails_the_job_with_a_clear_message(tmp_path):
    done = _torchrun([*SMALL, "--out", str(tmp_path), "--fail-rank", "1", "--fail-at-step", "1", "--timeout", "30"],
                     timeout=90)
    assert done.returncode != 0
    assert "rank 1: failing on purpose at step 1" in done.stderr
    assert "exitcode  : 17" in done.stderr  # torchrun names the rank that died and its exit code
    assert not (tmp_path / "losses.json").exists()


def test_a_rank_that_stops_answering_is_caught_by_the_time_out(tmp_path):
    done = _torchrun([*SMALL, "--out", str(tmp_path), "--fail-rank", "1", "--fail-at-step", "1",
                      "--fail-mode", "hang", "--timeout", "4"], timeout=90)
    assert done.returncode != 0
    assert "rank 0: all-reduce of the token count at step 1 failed" in done.stderr
    assert "within the 4 s time-out" in done.stderr
