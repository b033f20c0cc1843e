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
    # the ranks' own messages come before torchrun's summary: show both ends (a rank that aborted
    # with SIGABRT under a loaded, OPENBLAS_NUM_THREADS=1 suite run was seen only through the summary)
    assert two.returncode == 0, stderr[:3000] + "\n…\n" + stderr[-1500:]
    a = json.loads((tmp_path / "p1" / "losses.json").read_text())
    b = json.loads((tmp_path / "p2" / "losses.json").read_text())
    assert (a["world_size"], b["world_size"]) == (1, 2)
    assert len(a["losses"]) == len(b["losses"]) == 3
    assert b["losses"] == pytest.approx(a["losses"], rel=1e-5)
    assert a["losses"][0] != a["losses"][-1]  # it trained: the loss moved


# a rank's life in a fresh interpreter: the group, then the optimizer (whose first use imports
# torch._dynamo and, through it, torch.distributed.nn), a collective, close — then the threads left
_RANK_LIFE = """
import os, torch
from trnlab.distributed import train
group = train.Group(30.0, distributed=True)
torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
group.all_reduce(torch.ones(4), "a tensor", step=0)
group.close()
print(sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")))
"""


def test_closing_the_group_ends_its_gloo_threads_while_python_is_still_alive():
    """A gloo worker thread that outlives destroy_process_group drops its last tensors during interpreter
    shutdown, where taking the GIL ends the thread inside C++: the rank aborts (SIGABRT, "terminate
    called without an active exception") after its work is done, now and then, under load. Checked
    deterministically: after close() no gloo thread is left (a one-rank gloo group, fresh process)."""
    env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="1", RANK="0")
    done = subprocess.run([sys.executable, "-c", _RANK_LIFE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    threads = done.stdout.strip().splitlines()[-1]
    assert "gloo" not in threads, threads


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


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")   # a zombie has ended
    except OSError:
        return False


def test_killing_the_launcher_ends_its_workers(tmp_path):
    import signal
    import time

    launcher = train.launch(2, [*SMALL[:1], "100000", *SMALL[2:], "--out", str(tmp_path)])   # would run for hours
    workers = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = [p for p in _children(launcher.pid) if "trnlab.distributed.train" in
                       open(f"/proc/{p}/cmdline").read().replace("\0", " ")]
            time.sleep(0.2)
        assert len(workers) == 2, launcher.stderr.read() if launcher.poll() is not None else "no workers started"
        time.sleep(3)                                                   # they are importing or training now
        os.kill(launcher.pid, signal.SIGKILL)                           # the launcher dies without cleaning up
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(map(_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_running, workers)), "workers outlived their launcher"
    finally:
        for pid in [launcher.pid, *workers]:                            # never leave orphans behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        launcher.communicate(timeout=30)


@pytest.mark.parametrize("change, says", [
    (["--steps", "0"], "--steps 0: must be at least 1"),
    (["--global-batch", "0"], "--global-batch 0: must be at least 1"),
    (["--n-embd", "30", "--n-head", "4"], "--n-embd 30 is not a multiple of --n-head 4"),
    (["--timeout", "nan"], "--timeout nan"),
    (["--out", "{file}/out"], "cannot be written"),
], ids=["steps", "global-batch", "heads", "timeout", "unwritable-out"])
def test_bad_arguments_are_found_before_any_work_starts(tmp_path, capsys, monkeypatch, change, says):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = [*SMALL, "--out", str(tmp_path / "out"), *[a.format(file=blocker) for a in change]]
    monkeypatch.setattr(train, "run", lambda args: pytest.fail("the job started"))
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
