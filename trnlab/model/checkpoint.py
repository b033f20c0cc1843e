"""Checkpoints: the weights as safetensors (no pickle) and the configuration as JSON.

    data/checkpoint/model.safetensors   every parameter, by name (the tied head is stored once)
    data/checkpoint/config.json         model config + tokenizer vocabulary
    data/checkpoint/train_log.json      how it was trained: losses, accuracy, wall time (optional)

Loading a checkpoint someone else wrote must not blow up: nothing is allocated before the files have
been checked against their own length and sane limits. Only regular files are read (not a device
or a pipe a path may be linked to), `config.json` is at most `MAX_CONFIG_BYTES`, its sizes are within
`LIMITS`, and the safetensors header (its tensor names, dtypes, shapes and byte ranges) must describe
exactly the model the config builds — shapes read from a model built on PyTorch's "meta" device, which
allocates nothing — and lie inside the file. Only then is the model built and its weights read. Every
way a file can be wrong is a `CheckpointError` naming the file, the rule and the value seen; weights
that are NaN or infinite load with a `NonFiniteWeightsWarning`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
import warnings
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from trnlab import DATA_DIR
from trnlab.data.tokenizer import CharTokenizer
from trnlab.model.gpt import GPT, GPTConfig

DEFAULT_CHECKPOINT = DATA_DIR / "checkpoint"                 # trained by PyTorch on the CPU (notebook 02)
SIMULATED_CHECKPOINT = DATA_DIR / "checkpoint_trn2"       # that one fine-tuned on the simulated Trn2 (notebook 07)
FORMAT = "trnlab-gpt/1"
MAX_CONFIG_BYTES = 1 << 20                     # a config is a few hundred bytes
MAX_HEADER_BYTES = 100 << 20                   # safetensors' own limit on its JSON header
LIMITS = {"vocab_size": 1 << 20, "block_size": 1 << 14, "n_layer": 256, "n_head": 1024, "n_embd": 1 << 16}
MAX_MASK_BYTES = 256 << 20                     # the causal masks (n_layer × block_size², not in the file)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded: the message names the file, the rule and the value."""


class NonFiniteWeightsWarning(UserWarning):
    """A checkpoint's weights contain NaN or infinite values (they load, and will give NaN logits)."""


def save_checkpoint(model: GPT, tokenizer: CharTokenizer, directory: Path, train_log: dict | None = None) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_model(model, str(directory / "model.safetensors"))
    config = {"format": FORMAT, "model": model.config.to_json(), "tokenizer": tokenizer.to_json()}
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if train_log is not None:
        (directory / "train_log.json").write_text(json.dumps(train_log, indent=1) + "\n")
    return directory


def _open_regular(path: Path, what: str) -> int:
    """A file descriptor of `path` if it is a regular file (a FIFO does not block the open)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"{path}: {what} must be a regular file, not a device, pipe or directory")
    return fd


def _read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of `path` if it is a regular file of at most `limit` bytes (checked on the open file)."""
    fd = _open_regular(path, what)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_size > limit:
            raise CheckpointError(f"{path}: {what} of {info.st_size:,} bytes, at most {limit:,}")
        return f.read(info.st_size)


def _model_config(raw: object, path: Path) -> GPTConfig:
    names = {f.name for f in fields(GPTConfig)}
    if not isinstance(raw, dict) or set(raw) - names:
        raise CheckpointError(f"{path}: 'model' must be an object with the keys {sorted(names)}, got "
                              f"{sorted(raw) if isinstance(raw, dict) else type(raw).__name__}")
    for name, limit in LIMITS.items():
        value = raw.get(name, getattr(GPTConfig, name))
        if type(value) is not int or not 1 <= value <= limit:
            raise CheckpointError(f"{path}: model.{name} = {json.dumps(value)[:40]}: an integer in 1..{limit:,}")
    dropout = raw.get("dropout", 0.0)
    if type(dropout) not in (int, float) or not 0.0 <= dropout < 1.0:
        raise CheckpointError(f"{path}: model.dropout = {json.dumps(dropout)[:40]}: a number in [0, 1)")
    try:
        config = GPTConfig(**raw)
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    mask_bytes = config.n_layer * config.block_size ** 2
    if mask_bytes > MAX_MASK_BYTES:
        raise CheckpointError(f"{path}: n_layer × block_size² = {mask_bytes:,} bytes of causal masks, at most "
                              f"{MAX_MASK_BYTES:,}")
    return config


def _read_config(directory: Path) -> tuple[GPTConfig, CharTokenizer]:
    path = directory / "config.json"
    try:
        config = json.loads(_read_regular_file(path, MAX_CONFIG_BYTES, "config.json"))
    except (ValueError, RecursionError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: not JSON ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        said = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise CheckpointError(f"{path}: format {said!r}, this version reads {FORMAT!r}")
    model_config = _model_config(config.get("model"), path)
    try:
        tokenizer = CharTokenizer.from_json(config["tokenizer"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: the tokenizer is not readable ({type(e).__name__}: {e})") from None
    if model_config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"{path}: vocab_size {model_config.vocab_size} but the tokenizer has "
                              f"{tokenizer.vocab_size} tokens")
    return model_config, tokenizer


def _check_weights_file(path: Path, config: GPTConfig) -> None:
    """The safetensors header describes exactly this config's parameters, inside the file's length."""
    fd = _open_regular(path, "the weights file")
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        size = info.st_size
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: {size} bytes, too short for a safetensors file")
        header_bytes = struct.unpack("<Q", head)[0]
        if header_bytes > min(MAX_HEADER_BYTES, size - 8):
            raise CheckpointError(f"{path}: a safetensors header of {header_bytes:,} bytes in a file of {size:,}")
        try:
            header = json.loads(f.read(header_bytes))
        except (ValueError, RecursionError) as e:
            raise CheckpointError(f"{path}: the safetensors header is not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header is not an object")
    header.pop("__metadata__", None)
    with torch.device("meta"):                                   # shapes only: nothing allocated
        expected = GPT(config)
    params = dict(expected.named_parameters())                   # the tied head once (as wte.weight)
    aliases = {name: name for name in params}
    aliases.update({"lm_head.weight": "wte.weight"})
    data = size - 8 - header_bytes
    seen = set()
    for name, entry in header.items():
        if name not in aliases:
            raise CheckpointError(f"{path}: tensor {name[:80]!r} is not a parameter of the configured model")
        if not isinstance(entry, dict) or entry.get("dtype") != "F32":
            raise CheckpointError(f"{path}: tensor {name!r} must be F32, got {str(entry)[:80]}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        want = list(params[aliases[name]].shape)
        if shape != want:
            raise CheckpointError(f"{path}: tensor {name!r} has shape {str(shape)[:80]}, the config gives {want}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data and offsets[1] - offsets[0] == 4 * math.prod(want)):
            raise CheckpointError(f"{path}: tensor {name!r} has byte range {str(offsets)[:80]}: "
                                  f"{4 * math.prod(want):,} bytes needed inside the {data:,} data bytes")
        seen.add(aliases[name])
    missing = sorted(set(params) - seen)
    if missing:
        raise CheckpointError(f"{path}: {len(missing)} parameters missing, e.g. {missing[:3]}")


def load_checkpoint(directory: Path = DEFAULT_CHECKPOINT) -> tuple[GPT, CharTokenizer]:
    """The model (in eval mode) and its tokenizer from a checkpoint directory (checked before anything
    is allocated: see the module docstring)."""
    directory = Path(directory)
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"no checkpoint in {directory}: config.json is missing (train one with "
                                f"`python -m trnlab train`)")
    config, tokenizer = _read_config(directory)
    weights = directory / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"no weights in {directory}: model.safetensors is missing")
    _check_weights_file(weights, config)
    model = GPT(config)
    try:
        load_model(model, str(weights))  # strict: every weight must be there
    except Exception as e:               # the header was checked; anything left is a damaged file
        raise CheckpointError(f"{weights}: {type(e).__name__}: {str(e)[:300]}") from None
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        warnings.warn(f"{weights}: {len(bad)} parameters hold NaN or infinite values, e.g. {bad[:3]}: the model "
                      f"will produce NaN", NonFiniteWeightsWarning, stacklevel=2)
    model.eval()
    return model, tokenizer


def load_train_log(directory: Path = DEFAULT_CHECKPOINT) -> dict:
    path = Path(directory) / "train_log.json"
    try:
        return json.loads(_read_regular_file(path, 64 << 20, "train_log.json"))
    except (ValueError, RecursionError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: not JSON ({type(e).__name__}: {str(e)[:200]})") from None
