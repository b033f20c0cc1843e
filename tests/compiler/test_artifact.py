"""The artifact: one file, hashed parts, no pickle; damaged files are refused naming the part."""
import json
import zipfile

import pytest
import torch

import trnlab.compiler as tc
from trnlab.compiler import artifact
from trnlab.runtime import Runtime


@pytest.fixture(scope="module")
def saved(compiled_tiny_gpt, tmp_path_factory):
    path = tmp_path_factory.mktemp("art") / "gpt.neff"
    compiled_tiny_gpt.save(path)
    return path


def _rewrite(src, dst, part, change):
    with zipfile.ZipFile(src) as z:
        items = {n: z.read(n) for n in z.namelist()}
        comment = z.comment
    items[part] = change(items[part])
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in items.items():
            z.writestr(n, data)
        z.comment = comment


def test_save_load_run_gives_the_same_logits(saved, compiled_tiny_gpt, tiny_gpt):
    _, idx = tiny_gpt
    a = artifact.load(saved)
    assert set(a.manifest["parts"]) == set(artifact.PARTS) | {"program.core0.json"}
    # the program core 0 runs: the whole graph traced into ONE program, a region per op
    (stored,) = a.executable.programs
    assert stored.regions()[0].startswith("embedding.0") and len(stored.instructions) > 100
    assert a.manifest["format_version"] == artifact.FORMAT_VERSION and a.manifest["target"] == "trn2"
    assert all(len(p["sha256"]) == 64 for p in a.manifest["parts"].values())
    with zipfile.ZipFile(saved) as z:
        assert not [n for n in z.namelist() if n.endswith((".pkl", ".pt", ".bin"))]
    loaded = Runtime("trn2").load(saved)
    got, _ = loaded.run(idx).outputs
    expected, _ = compiled_tiny_gpt(idx)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_truncated_file_is_refused(saved, tmp_path):
    bad = tmp_path / "cut.neff"
    bad.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    with pytest.raises(tc.ArtifactTruncatedError, match="truncated"):
        artifact.load(bad)


def test_corrupted_weights_are_refused_naming_the_part(saved, tmp_path):
    bad = tmp_path / "flip.neff"
    _rewrite(saved, bad, "weights.safetensors", lambda b: b[:-10] + bytes(10))
    with pytest.raises(tc.ArtifactCorruptError) as e:
        artifact.load(bad)
    assert e.value.part == "weights.safetensors"


def test_tampered_program_is_refused(saved, tmp_path):
    bad = tmp_path / "tamper.neff"
    _rewrite(saved, bad, "program.core0.json", lambda b: b.replace(b'"gelu"', b'"relu"'))
    with pytest.raises(tc.ArtifactCorruptError, match="program.core0.json"):
        artifact.load(bad)


def test_tampered_manifest_is_refused(saved, tmp_path):
    bad = tmp_path / "manifest.neff"
    _rewrite(saved, bad, "manifest.json", lambda b: b.replace(b'"trn2"', b'"trn1"'))
    with pytest.raises(tc.ArtifactCorruptError) as e:
        artifact.load(bad)
    assert e.value.part == "manifest.json"


def test_wrong_version_is_refused(saved, tmp_path, monkeypatch):
    monkeypatch.setattr(artifact, "FORMAT_VERSION", 99)
    with pytest.raises(tc.ArtifactVersionError, match="format version 2"):
        artifact.load(saved)


def test_wrong_target_is_refused(saved):
    with pytest.raises(tc.ArtifactTargetError, match="compiled for target trn2"):
        Runtime("trn1").load(saved)


def test_manifest_is_plain_json(saved):
    with zipfile.ZipFile(saved) as z:
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["format"] == "trnlab-neff"
    (partition,) = manifest["cores"]["0"]["partitions"]          # no host ops: one device program
    assert partition["kind"] == "device" and partition["program"] == "program.core0.json"
    assert "idx" in partition["inputs"] and partition["outputs"]
