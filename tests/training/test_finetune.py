"""The chain's "Trainium → trained model": the course's model fine-tuned on the simulated chip, saved as a
checkpoint (safetensors + JSON, no pickle) with its provenance, and the committed one what serving loads."""
from __future__ import annotations

import hashlib
import json

import torch

from trnlab.cli import main
from trnlab.model.checkpoint import DEFAULT_CHECKPOINT, SIMULATED_CHECKPOINT, load_checkpoint, load_train_log


def test_train_sim_writes_a_loadable_checkpoint_with_its_provenance(tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert main(["train-sim", "--steps", "1", "--batch-size", "4", "--no-test", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "train_log.json"]
    model, _ = load_checkpoint(out)                                   # safetensors + JSON: no pickle
    log = json.loads((out / "train_log.json").read_text())
    assert log["trained_on"].startswith("simulated trn2") and log["kind"] == "fine-tune"
    assert log["finetune_config"]["steps"] == 1 and len(log["losses"]) == 1
    assert log["simulated_seconds"] > 0 and log["usd"] > 0
    assert log["started_from"]["model_sha256"] == hashlib.sha256(
        (DEFAULT_CHECKPOINT / "model.safetensors").read_bytes()).hexdigest()
    assert log["command"].startswith("python -m trnlab train-sim --steps 1 --batch-size 4")
    assert "1 steps on simulated trn2" in capsys.readouterr().out


def test_the_served_checkpoint_was_trained_on_the_simulated_chip_and_keeps_the_cpu_accuracy():
    made = load_train_log(SIMULATED_CHECKPOINT)
    cpu = load_train_log(DEFAULT_CHECKPOINT)
    assert made["trained_on"].startswith("simulated trn2")
    assert made["started_from"]["model_sha256"] == hashlib.sha256(
        (DEFAULT_CHECKPOINT / "model.safetensors").read_bytes()).hexdigest()
    assert all(made["test_accuracy"][task] >= cpu["test_accuracy"][task] - 0.005 for task in cpu["test_accuracy"])
    tuned, _ = load_checkpoint(SIMULATED_CHECKPOINT)
    base, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    changed = [n for (n, a), (_, b) in zip(tuned.state_dict().items(), base.state_dict().items())
               if a.dtype.is_floating_point and not torch.equal(a, b)]
    assert changed                                                   # the fine-tune moved the weights
