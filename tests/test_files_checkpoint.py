"""A checkpoint someone else wrote cannot blow up the loader: sizes and shapes are checked against the
file's own length and sane limits before any model is allocated, only regular files are read, every
crafted file is a named `CheckpointError`, and non-finite weights load with a warning."""
from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
import torch

from trnlab.model import checkpoint
from trnlab.model.checkpoint import (DEFAULT_CHECKPOINT, CheckpointError, NonFiniteWeightsWarning, load_checkpoint,
                                     save_checkpoint)


@pytest.fixture
def ckpt(tmp_path):
    shutil.copytree(DEFAULT_CHECKPOINT, tmp_path / "ckpt")
    return tmp_path / "ckpt"


@pytest.fixture
def no_real_model(monkeypatch):
    """Fail the test if a model is built anywhere but on the meta device (that is: allocated)."""
    real_gpt = checkpoint.GPT

    def guarded(config):
        if torch.get_default_device().type != "meta":
            pytest.fail(f"a model was allocated for {config} before the files were checked")
        return real_gpt(config)
    monkeypatch.setattr(checkpoint, "GPT", guarded)


def edit_config(ckpt, **model):
    config = json.loads((ckpt / "config.json").read_text())
    config["model"].update(model)
    (ckpt / "config.json").write_text(json.dumps(config))


def test_a_small_config_for_a_huge_model_is_refused_before_anything_is_allocated(ckpt, no_real_model):
    edit_config(ckpt, n_layer=48, n_embd=12288, n_head=96, block_size=2048)    # ~90 B parameters: ~350 GB
    assert (ckpt / "config.json").stat().st_size < 400
    with pytest.raises(CheckpointError, match=r"has shape \[64\], the config gives \[12288\]"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("model, says", [
    ({"n_layer": 10 ** 9}, r"model.n_layer = 1000000000: an integer in 1..256"),
    ({"n_embd": "64"}, r"model.n_embd = \"64\""),
    ({"n_layer": -1}, r"model.n_layer = -1"),
    ({"block_size": 16384, "n_layer": 4}, r"causal masks"),
    ({"dropout": float("nan")}, r"model.dropout"),
    ({"n_head": 5}, r"n_embd must be a multiple of n_head"),
    ({"surprise": 1}, r"'model' must be an object"),
], ids=["huge-n_layer", "string-size", "negative", "masks", "nan-dropout", "heads", "unknown-key"])
def test_a_config_outside_the_limits_is_a_named_error(ckpt, no_real_model, model, says):
    edit_config(ckpt, **model)
    with pytest.raises(CheckpointError, match=says):
        load_checkpoint(ckpt)


def rewrite_header(ckpt, edit):
    path = ckpt / "model.safetensors"
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def test_crafted_weight_files_are_named_errors(ckpt, no_real_model):
    path = ckpt / "model.safetensors"
    original = path.read_bytes()
    cases = [
        (lambda h: h["wpe.weight"].update(data_offsets=[0, 10 ** 12]), "byte range"),
        (lambda h: h["wpe.weight"].update(dtype="F64"), "must be F32"),
        (lambda h: h.update({"evil": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}), "'evil' is not"),
        (lambda h: h.pop("ln_f.bias"), "1 parameters missing"),
    ]
    for edit, says in cases:
        path.write_bytes(original)
        rewrite_header(ckpt, edit)
        with pytest.raises(CheckpointError, match=says):
            load_checkpoint(ckpt)
    for raw, says in [(struct.pack("<Q", 10 ** 15) + original[8:], "header of"),
                      (struct.pack("<Q", 16) + b"{not json}".ljust(16) + original[24:], "not JSON"),
                      (b"abc", "too short")]:
        path.write_bytes(raw)
        with pytest.raises(CheckpointError, match=says):
            load_checkpoint(ckpt)


@pytest.mark.parametrize("text, says", [("{not json", "not JSON"), ("[" * 30000, "not JSON"), ("[]", "format"),
                                        (json.dumps({"format": "trnlab-gpt/1", "model": {}}), "tokenizer")])
def test_a_crafted_config_is_a_named_error(ckpt, no_real_model, text, says):
    (ckpt / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=says):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_only_regular_files_are_read(ckpt, name):
    (ckpt / name).unlink()
    os.symlink("/dev/zero", ckpt / name)                 # read "until memory runs out" if it were read
    with pytest.raises(CheckpointError, match="must be a regular file"):
        load_checkpoint(ckpt)


def test_non_finite_weights_load_with_a_warning(ckpt):
    model, tokenizer = load_checkpoint(ckpt)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[0, 0] = float("nan")
    save_checkpoint(model, tokenizer, ckpt)
    with pytest.warns(NonFiniteWeightsWarning, match="NaN or infinite"):
        load_checkpoint(ckpt)


def test_the_committed_checkpoint_loads_without_warnings():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, tokenizer = load_checkpoint()
    assert model.config.vocab_size == tokenizer.vocab_size
