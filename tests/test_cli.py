"""`python -m trnlab ask` and `train` end to end."""

from __future__ import annotations

import subprocess
import sys

import torch

from trnlab import REPO_ROOT
from trnlab.data import load_split
from trnlab.model import DEFAULT_CHECKPOINT, accuracy_by_task, ask, load_checkpoint, load_train_log
from trnlab.cli import train_main


def run_trnlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trnlab", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)


def test_ask_answers_with_the_committed_checkpoint():
    done = run_trnlab("ask", "12+5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "17"
    model, tokenizer = load_checkpoint()
    assert ask(model, tokenizer, "12+5") == "17"


def test_ask_with_an_unknown_character_names_it():
    done = run_trnlab("ask", "12*5")
    assert done.returncode == 2
    assert "unknown character '*'" in done.stderr and "Traceback" not in done.stderr


def test_ask_with_a_prompt_longer_than_the_context_says_so():
    done = run_trnlab("ask", "reverse " + "a" * 40)
    assert done.returncode == 2
    assert "prompt too long for the context" in done.stderr and "Traceback" not in done.stderr


def test_ask_samples_reproducibly_with_a_seed():
    first = run_trnlab("ask", "sort 5213", "--temperature", "1.5", "--seed", "3")
    second = run_trnlab("ask", "sort 5213", "--temperature", "1.5", "--seed", "3")
    assert first.returncode == 0 and first.stdout == second.stdout


def test_committed_checkpoint_meets_its_accuracy_targets_on_the_test_split():
    model, tokenizer = load_checkpoint()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # pytest runs 2 workers on 2 cores: one thread each avoids oversubscription
    try:
        accuracy = accuracy_by_task(model, tokenizer, load_split("test"))
    finally:
        torch.set_num_threads(threads)
    assert accuracy["add"] >= 0.95
    assert min(accuracy.values()) >= 0.90
    # the figures stored with the checkpoint are the ones it really earns
    assert load_train_log(DEFAULT_CHECKPOINT)["test_accuracy"] == accuracy


def test_train_command_writes_a_loadable_checkpoint(tmp_path, capsys):
    code = train_main(["--steps", "3", "--n-layer", "1", "--n-embd", "32", "--n-head", "2",
                       "--eval-interval", "3", "--no-test", "--out", str(tmp_path)])
    assert code == 0
    model, _ = load_checkpoint(tmp_path)
    assert model.config.n_embd == 32
    assert "3 steps" in capsys.readouterr().out


def test_config_command_prints_every_switch_with_its_value_now(capsys, monkeypatch):
    from trnlab import config
    from trnlab.cli import main
    monkeypatch.setenv("TRNLAB_FAST", "0")
    assert main(["config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for switch in config.SWITCHES.values():
        assert any(line.split()[:2] == [switch.name, switch.env] for line in lines), switch.name
    fast = next(line for line in lines if line.startswith("fast "))
    assert fast.split()[2:4] == ["True", "False"]          # default True, now False (TRNLAB_FAST=0)


def test_an_unknown_command_lists_the_commands_and_fails(capsys):
    from trnlab.cli import main
    assert main(["frobnicate"]) == 2
    out = capsys.readouterr().out
    assert all(command in out for command in ("train", "ask", "serve", "config"))


def test_course_execute_help_prints_usage_and_a_missing_notebook_is_a_message():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "trnlab.course", "execute", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "usage: python -m trnlab.course execute" in out.stdout
    out = subprocess.run([sys.executable, "-m", "trnlab.course", "execute", "no_such.ipynb"], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "no notebook at no_such.ipynb" in out.stderr and "Traceback" not in out.stderr
