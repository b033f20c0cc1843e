"""Checkpoint and resume a compiled training run: safetensors for the tensors, JSON for the rest.

    DIR/train_state.safetensors   param.<name>, exp_avg.<name>, exp_avg_sq.<name> (fp32)
    DIR/train_state.json          format, step count, target, autocast, optimizer, batch shape,
                                  parameter names, and the losses so far

No pickle: a checkpoint is data a user may load from anywhere. Resuming restores the weights, both
AdamW moments and the step count (the bias corrections depend on it), so the next steps are the
ones an uninterrupted run would have taken.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

FORMAT = "trnlab-train-state/1"


def save_train_state(step, directory, losses: list | None = None) -> Path:
    """Write `step`'s state (a TrainStep) into `directory`; returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = step.state_dict()
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in state["tensors"].items()},
              str(directory / "train_state.safetensors"))
    meta = {"format": FORMAT, **state["meta"], "losses": [float(x) for x in (losses or [])]}
    (directory / "train_state.json").write_text(json.dumps(meta, indent=1) + "\n")
    return directory


def load_train_state(step, directory) -> list:
    """Restore a TrainStep from `directory`; returns the losses recorded so far."""
    directory = Path(directory)
    meta_path = directory / "train_state.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"no training state in {directory}: {meta_path.name} is missing")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path}: format {meta.get('format')!r}, this version reads {FORMAT!r}")
    for key, mine in (("target", step.target), ("autocast", step.autocast)):
        if meta[key] != mine:
            raise ValueError(f"{meta_path}: saved with {key}={meta[key]!r}, this step has {key}={mine!r}")
    tensors = load_file(str(directory / "train_state.safetensors"))
    step.load_state_dict({"tensors": tensors, "meta": meta})
    return list(meta.get("losses", []))
