"""An artifact someone else wrote cannot blow up the loader: only regular files are read, nothing is
inflated (parts are stored as is, inside the file's length), a part that hashes right but does not
parse is a named error, a binding ties an artifact to the key it was saved with (serving: the
checkpoint), and non-finite constants load with a warning."""
from __future__ import annotations

import hashlib
import json
import os
import zipfile

import numpy as np
import pytest

from trnlab.compiler import ArtifactCorruptError, artifact
from trnlab.compiler.artifact import ArtifactBindingError, ArtifactFileError, NonFiniteConstantsWarning
from trnlab.model import load_checkpoint
from trnlab.serve.steps import compile_step

MODEL, _ = load_checkpoint()
KEY = hashlib.sha256(b"the checkpoint").digest()


@pytest.fixture(scope="module")
def compiled_prefill():
    return compile_step(MODEL, "prefill", (1, 8), "trn2")


@pytest.fixture
def saved(compiled_prefill, tmp_path):
    path = tmp_path / "prefill.neff"
    artifact.save(compiled_prefill, path, meta={"kind": "prefill"}, bind_key=KEY)
    return path


def parts_of(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def rewrite(path, parts: dict[str, bytes], compression=zipfile.ZIP_STORED, rehash=True, **extra) -> None:
    """Write `parts` back as an artifact whose manifest hashes match them (what a tamperer would do)."""
    manifest = json.loads(parts["manifest.json"])
    if rehash:
        manifest["parts"] = {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)}
                             for n, d in parts.items() if n != "manifest.json" and n in manifest["parts"]}
    manifest.update(extra)
    manifest_bytes = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.writestr("manifest.json", manifest_bytes)
        for name, data in parts.items():
            if name != "manifest.json":
                z.writestr(name, data)
        z.comment = hashlib.sha256(manifest_bytes).hexdigest().encode()


def test_a_saved_artifact_loads_with_its_key_and_meta(saved):
    loaded = artifact.load(saved, target="trn2", bind_key=KEY)
    assert loaded.manifest["meta"] == {"kind": "prefill"}
    assert artifact.load(saved).target == "trn2"                          # no key: hashes only, as before


def test_an_artifact_with_altered_and_rehashed_weights_fails_its_binding(saved):
    parts = parts_of(saved)
    weights = bytearray(parts["weights.safetensors"])
    weights[-4:] = np.float32(1e3).tobytes()                              # one weight changed ...
    parts["weights.safetensors"] = bytes(weights)
    rewrite(saved, parts)                                                 # ... and every hash made to match
    assert artifact.load(saved).constants                                 # the hashes alone cannot tell
    with pytest.raises(ArtifactBindingError, match="not bound to this checkpoint"):
        artifact.load(saved, bind_key=KEY)


def test_an_artifact_of_another_checkpoint_fails_the_binding(saved):
    with pytest.raises(ArtifactBindingError):
        artifact.load(saved, bind_key=hashlib.sha256(b"another checkpoint").digest())


def test_a_compressed_artifact_is_refused_before_anything_is_inflated(saved, monkeypatch):
    parts = parts_of(saved)
    rewrite(saved, parts, compression=zipfile.ZIP_DEFLATED)               # honest bytes, compressed
    with pytest.raises(ArtifactCorruptError, match="is compressed"):
        artifact.load(saved)
    parts["weights.safetensors"] = bytes(64 << 20)                        # a "bomb": 64 MiB of zeros
    rewrite(saved, parts, compression=zipfile.ZIP_DEFLATED)
    assert saved.stat().st_size < 2 << 20
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda *a: pytest.fail("a part was inflated"))
    with pytest.raises(ArtifactCorruptError, match="is compressed"):
        artifact.load(saved)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
def test_only_regular_files_are_read(tmp_path, kind):
    path = tmp_path / "step.neff"
    if kind == "dev-zero":
        os.symlink("/dev/zero", path)                                     # would be read until memory runs out
    elif kind == "fifo":
        os.mkfifo(path)                                                   # would block for ever
    else:
        path.mkdir()
    with pytest.raises(ArtifactFileError, match="not a regular file"):
        artifact.load(path)


@pytest.mark.parametrize("part, content", [
    ("graph.json", b"{}"),
    ("graph.json", b"[" * 30000),
    ("tensors.json", b'{"constants": {"x": {"dtype": "float32", "shape": [3], "stored_as": "float32"}}}'),
    ("calls.json", b'{"calls": 7}'),
    ("weights.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"),
], ids=["empty-graph", "deep-graph", "missing-tensor", "bad-calls", "bad-weights"])
def test_a_part_that_hashes_right_but_does_not_parse_is_a_named_error(saved, part, content):
    parts = parts_of(saved)
    parts[part] = content
    rewrite(saved, parts)
    with pytest.raises(ArtifactCorruptError, match="does not parse"):
        artifact.load(saved)


def test_a_manifest_that_is_not_an_object_is_a_named_error(saved):
    with zipfile.ZipFile(saved, "w") as z:
        z.writestr("manifest.json", b"[]")
        z.comment = hashlib.sha256(b"[]").hexdigest().encode()
    with pytest.raises(artifact.ArtifactError):
        artifact.load(saved)


def test_non_finite_constants_load_with_a_warning(compiled_prefill, tmp_path):
    name = next(iter(compiled_prefill.graph.constants))
    original = compiled_prefill.graph.constants[name]
    compiled_prefill.graph.constants[name] = np.full_like(original, np.nan)
    try:
        path = artifact.save(compiled_prefill, tmp_path / "nan.neff")
    finally:
        compiled_prefill.graph.constants[name] = original
    with pytest.warns(NonFiniteConstantsWarning, match="NaN or infinite"):
        artifact.load(path)


# -- the serving cache: an artifact is used only for the checkpoint and the step it was compiled for ----------
@pytest.fixture
def fresh_steps(monkeypatch):
    from trnlab.serve import steps as compiled
    monkeypatch.setattr(compiled, "_STEPS", {})                       # as in a new process
    return compiled


def cached_path(cache_dir, bucket) -> "os.PathLike":
    from trnlab.serve.steps import model_fingerprint
    return cache_dir / model_fingerprint(MODEL) / f"trn2-prefill-{bucket[0]}x{bucket[1]}.neff"


def test_a_valid_artifact_of_another_bucket_is_compiled_again(tmp_path, fresh_steps):
    fresh_steps.get_step(MODEL, "prefill", (1, 8), "trn2", cache_dir=tmp_path)
    wrong = cached_path(tmp_path, (1, 16))
    wrong.write_bytes(cached_path(tmp_path, (1, 8)).read_bytes())     # the 8-position program, named for 16
    step = fresh_steps.get_step(MODEL, "prefill", (1, 16), "trn2", cache_dir=tmp_path)
    assert step.source == "compiled"
    (logits, *_), _ = step.run(np.zeros((1, 16), np.int32))           # the bucket works
    assert logits.shape == (1, 16, MODEL.config.vocab_size)
    fresh_steps._STEPS.clear()                                        # and the file was replaced by the right one
    assert fresh_steps.get_step(MODEL, "prefill", (1, 16), "trn2", cache_dir=tmp_path).source == "artifact"


def test_a_cached_artifact_with_altered_and_rehashed_weights_is_not_served(tmp_path, fresh_steps):
    fresh_steps.get_step(MODEL, "prefill", (1, 8), "trn2", cache_dir=tmp_path)
    path = cached_path(tmp_path, (1, 8))
    parts = parts_of(path)
    table = json.loads(parts["tensors.json"])["constants"]
    assert table, "the step has weights"
    weights = bytearray(parts["weights.safetensors"])
    weights[-64:] = bytes(64)
    parts["weights.safetensors"] = bytes(weights)
    rewrite(path, parts)
    fresh_steps._STEPS.clear()
    step = fresh_steps.get_step(MODEL, "prefill", (1, 8), "trn2", cache_dir=tmp_path)
    assert step.source == "compiled"                                  # not the altered file
    genuine = compile_step(MODEL, "prefill", (1, 8), "trn2").constants
    assert all(np.array_equal(step.constants[n], genuine[n]) for n in genuine)
