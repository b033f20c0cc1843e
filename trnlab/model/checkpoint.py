"""Checkpoints: the weights as safetensors (no pickle) and the configuration as JSON.

    data/checkpoint/model.safetensors   every parameter, by name (the tied head is stored once)
    data/checkpoint/config.json         model config + tokenizer vocabulary
    data/checkpoint/train_log.json      how it was trained: losses, accuracy, wall time (optional)
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_model, save_model

from trnlab import DATA_DIR
from trnlab.data.tokenizer import CharTokenizer
from trnlab.model.gpt import GPT, GPTConfig

DEFAULT_CHECKPOINT = DATA_DIR / "checkpoint"
FORMAT = "trnlab-gpt/1"


def save_checkpoint(model: GPT, tokenizer: CharTokenizer, directory: Path, train_log: dict | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_model(model, str(directory / "model.safetensors"))
    config = {"format": FORMAT, "model": model.config.to_json(), "tokenizer": tokenizer.to_json()}
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if train_log is not None:
        (directory / "train_log.json").write_text(json.dumps(train_log, indent=1) + "\n")
    return directory


def load_checkpoint(directory: Path = DEFAULT_CHECKPOINT) -> tuple[GPT, CharTokenizer]:
    """The model (in eval mode) and its tokenizer from a checkpoint directory."""
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"no checkpoint in {directory}: {config_path.name} is missing (train one with `python -m trnlab train`)")
    config = json.loads(config_path.read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{config_path}: format {config.get('format')!r}, this version reads {FORMAT!r}")
    tokenizer = CharTokenizer.from_json(config["tokenizer"])
    model = GPT(GPTConfig(**config["model"]))
    if model.config.vocab_size != tokenizer.vocab_size:
        raise ValueError(f"{config_path}: vocab_size {model.config.vocab_size} but the tokenizer has {tokenizer.vocab_size} tokens")
    load_model(model, str(directory / "model.safetensors"))  # strict: every weight must be there
    model.eval()
    return model, tokenizer


def load_train_log(directory: Path = DEFAULT_CHECKPOINT) -> dict:
    return json.loads((Path(directory) / "train_log.json").read_text())
