"""The artifact: one NEFF-like file holding everything a device needs to run a compiled model.

A zip archive (stored, no compression; `unzip -l` lists it) of these parts:

    manifest.json          format, format_version, target, compiler_version, the parts with the
                           SHA-256 and size of each, the partitions of each core (which program, its
                           arguments and results by value name; host partitions by their ops)
    graph.json             the optimised graph (ops, shapes, dtypes, source lines; no tensor data)
    calls.json             the lowered calls (kernel, views, host ops): what the program was traced from
    program.core0.json     the program core 0 runs: the whole graph traced into ONE program of the
                           program layer (trnlab.hardware.Program JSON: buffer table + instructions,
                           a region per op); with host ops, one program.core0.partN.json per device
                           partition
    tensors.json           the tensor table: every constant (dtype, shape, kind) + the memory plan
    weights.safetensors    the constants' bytes (safetensors: no pickle, nothing executable)

The zip comment holds the SHA-256 of manifest.json, so the manifest itself is checked too. `load`
refuses, with a named error saying which part failed: a file that is not an artifact or ends early
(`ArtifactTruncatedError`), a part whose bytes do not match its hash (`ArtifactCorruptError`: corrupted
or tampered), another format version (`ArtifactVersionError`), another target (`ArtifactTargetError`).

A file someone else wrote cannot blow up the loader: only a regular file of at most
`MAX_ARTIFACT_BYTES` is read (`ArtifactFileError`: not a device a path is linked to), every part must
be stored uncompressed with its size inside the file's length before a byte is inflated (so a small
zip cannot expand to gigabytes), and a part that hashes right but does not parse is an
`ArtifactCorruptError` naming it. Constants that are NaN or infinite load with a
`NonFiniteConstantsWarning`.

Hashes catch damage, not intent: whoever rewrites a part can rewrite its hash. `save(..., bind_key=)`
therefore adds a binding — an HMAC-SHA-256, keyed by `bind_key`, over the parts' hashes, the target
and `meta` — and `load(..., bind_key=)` refuses a file whose binding does not verify with that key
(`ArtifactBindingError`). Serving keys it with the SHA-256 of the checkpoint's weights
(trnlab.serve.steps), so a cached artifact is served only with the checkpoint it was compiled from.
"""
from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import stat
import warnings
import zipfile
from dataclasses import dataclass

import numpy as np

from trnlab.compiler.errors import (ArtifactCorruptError, ArtifactError, ArtifactTargetError, ArtifactTruncatedError,
                                    ArtifactVersionError)
from trnlab.compiler.ir import Graph
from trnlab.compiler.lower import LoweredGraph

FORMAT = "trnlab-neff"
FORMAT_VERSION = 2
PARTS = ("graph.json", "calls.json", "tensors.json", "weights.safetensors")   # + the program parts
MAX_ARTIFACT_BYTES = 2 << 30           # the file; its parts together hold at most as many bytes
MAX_PARTS = 1024


class ArtifactFileError(ArtifactError):
    """The path is not a regular file of a readable size (a device, a pipe, a directory, too large)."""


class ArtifactBindingError(ArtifactError):
    """The artifact is not bound to the key it is loaded with (compiled from another checkpoint, or altered)."""


class NonFiniteConstantsWarning(UserWarning):
    """An artifact's constants (its weights) contain NaN or infinite values."""


@dataclass
class Artifact:
    manifest: dict
    graph: Graph
    program: LoweredGraph                  # the lowered calls
    constants: dict
    executable: object = None              # executable.Executable: the stored program(s)

    @property
    def target(self) -> str:
        return self.manifest["target"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json(obj) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def _weights_bytes(constants: dict) -> tuple[bytes, dict]:
    from safetensors.numpy import save
    from trnlab.compiler.ops import dtype_name
    arrays, table = {}, {}
    for name, a in constants.items():
        a = np.ascontiguousarray(a)
        dtype = dtype_name(a.dtype)
        stored = a.view(np.uint16) if dtype in ("bfloat16",) else a     # safetensors.numpy has no ml_dtypes bf16
        arrays[name] = stored
        table[name] = {"dtype": dtype, "shape": list(a.shape), "stored_as": dtype_name(stored.dtype)}
    return save(arrays) if arrays else b"", table


def _binding(key: bytes, manifest: dict) -> str:
    """HMAC-SHA-256 (keyed by `key`) of what the manifest vouches for: every part's hash, the target, `meta`."""
    signed = {"parts": {name: entry["sha256"] for name, entry in manifest["parts"].items()},
              "target": manifest["target"], "meta": manifest.get("meta")}
    return hmac.new(key, json.dumps(signed, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def save(compiled, path, meta: dict | None = None, bind_key: bytes | None = None) -> str:
    """Write `compiled` (a CompiledModel) to `path` as one artifact file; returns the path. `meta` (plain
    JSON) is stored in the manifest; with `bind_key` the artifact is bound to that key (module docstring)."""
    from trnlab.compiler.driver import __version__
    if compiled.program is None:
        raise ArtifactError("nothing to save: the model was compiled with stop_after, there is no program", "program")
    weights, table = _weights_bytes(compiled.graph.constants)
    for name, entry in table.items():
        entry["kind"] = compiled.graph.values[name].kind
    exe = compiled.executable
    partitions, programs = [], {}
    for i, p in enumerate(exe.partitions):
        if p.kind == "host":
            partitions.append({"kind": "host", "ops": [c.region for c in p.calls if c.kind == "host"]})
            continue
        name = "program.core0.json" if len(exe.partitions) == 1 else f"program.core0.part{i}.json"
        programs[name] = p.program.dumps().encode()
        partitions.append({"kind": "device", "program": name, "inputs": p.inputs, "outputs": p.outputs})
    parts = {
        "graph.json": _json(compiled.graph.to_json()),
        "calls.json": _json(compiled.program.to_json()),
        **programs,
        "tensors.json": _json({"constants": table, "memory": compiled.graph.meta.get("memory", {})}),
        "weights.safetensors": weights,
    }
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "target": compiled.options.target,
        "compiler_version": __version__, "autocast": compiled.options.autocast,
        "cores": {"0": {"partitions": partitions}},
        "parts": {name: {"sha256": _sha(data), "bytes": len(data)} for name, data in parts.items()},
    }
    if meta is not None:
        manifest["meta"] = meta
    if bind_key is not None:
        manifest["binding"] = _binding(bind_key, manifest)
    manifest_bytes = _json(manifest)
    path = str(path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", manifest_bytes)
        for name, data in parts.items():
            z.writestr(name, data)
        z.comment = _sha(manifest_bytes).encode()
    return path


def _read_file(path) -> bytes:
    """The bytes of a regular file of at most MAX_ARTIFACT_BYTES (checked on the open file, then read)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))     # a FIFO must not block the open
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ArtifactFileError(f"not an artifact: {path} is not a regular file (a device, pipe or directory)", "file")
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_size > MAX_ARTIFACT_BYTES:
            raise ArtifactFileError(f"artifact {path}: {info.st_size:,} bytes, at most {MAX_ARTIFACT_BYTES:,}", "file")
        return f.read(info.st_size)


def _check_members(z: zipfile.ZipFile, path, size: int) -> None:
    """Every member stored as is (no compression) and all of them inside the file: nothing inflates."""
    members = z.infolist()
    if len(members) > MAX_PARTS:
        raise ArtifactCorruptError(f"artifact {path}: {len(members):,} parts, at most {MAX_PARTS}", "file")
    for info in members:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise ArtifactCorruptError(f"artifact {path}: part {info.filename[:80]} is compressed "
                                       f"({info.compress_size:,} bytes stored, {info.file_size:,} inflated); "
                                       f"artifacts store every part as is", info.filename)
    if sum(info.file_size for info in members) > size:
        raise ArtifactCorruptError(f"artifact {path}: its parts claim more bytes than the file's {size:,}", "file")


def _read(path) -> tuple[dict, dict]:
    raw = _read_file(path)
    if not raw.startswith(b"PK"):
        raise ArtifactTruncatedError(f"not an artifact: {path} does not start like one ({len(raw)} bytes)", "file")
    try:
        z = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile as e:
        raise ArtifactTruncatedError(f"truncated or damaged artifact {path}: {e} ({len(raw)} bytes)", "file") from None
    with z:
        _check_members(z, path, len(raw))
        names = set(z.namelist())
        parts = {}
        wanted = ("manifest.json",) + PARTS + tuple(sorted(n for n in names if n.startswith("program.")))
        for name in wanted:
            if name not in names:
                raise ArtifactTruncatedError(f"artifact {path}: part {name} is missing", name)
            try:
                parts[name] = z.read(name)
            except (zipfile.BadZipFile, EOFError, OSError) as e:   # zip's own CRC: bytes changed or cut
                raise ArtifactCorruptError(f"artifact {path}: part {name} is damaged ({e})", name) from None
        comment = z.comment.decode(errors="replace")
    manifest_bytes = parts.pop("manifest.json")
    if comment != _sha(manifest_bytes):
        raise ArtifactCorruptError(f"artifact {path}: manifest.json does not match its SHA-256 (tampered or corrupted)",
                                   "manifest.json")
    try:
        manifest = json.loads(manifest_bytes)
    except (ValueError, RecursionError) as e:
        raise ArtifactCorruptError(f"artifact {path}: manifest.json is not JSON ({str(e)[:200]})",
                                   "manifest.json") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("parts", {}), dict):
        raise ArtifactCorruptError(f"artifact {path}: manifest.json is not a manifest", "manifest.json")
    return manifest, parts


def load(path, target: str | None = None, bind_key: bytes | None = None) -> Artifact:
    """Read and verify an artifact file; `target` (if given) must be the one it was compiled for, and
    with `bind_key` the artifact must be bound to that key."""
    manifest, parts = _read(path)
    try:
        return _load(path, manifest, parts, target, bind_key)
    except ArtifactError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as e:
        # every part hashed right but one does not parse: a crafted file
        raise ArtifactCorruptError(f"artifact {path}: a part does not parse ({type(e).__name__}: "
                                   f"{str(e)[:200]})", "parts") from None
    except Exception as e:            # safetensors' own error class, and whatever else a crafted part raises
        if type(e).__name__ != "SafetensorError":
            raise
        raise ArtifactCorruptError(f"artifact {path}: weights.safetensors does not parse ({str(e)[:200]})",
                                   "weights.safetensors") from None


def _load(path, manifest: dict, parts: dict, target: str | None, bind_key: bytes | None) -> Artifact:
    if manifest.get("format") != FORMAT:
        raise ArtifactVersionError(f"artifact {path}: format {manifest.get('format')!r}, this runtime reads {FORMAT!r}",
                                   "manifest.format")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactVersionError(
            f"artifact {path}: format version {manifest.get('format_version')!r}, this runtime reads version "
            f"{FORMAT_VERSION}: recompile it with this trnlab", "manifest.format_version")
    listed = manifest.get("parts", {})
    for name in set(listed) - set(parts):
        raise ArtifactTruncatedError(f"artifact {path}: part {name} is missing", name)
    for name in parts:
        expected = listed.get(name, {})
        data = parts[name]
        if len(data) != expected.get("bytes"):
            raise ArtifactTruncatedError(f"artifact {path}: part {name} has {len(data)} bytes, the manifest says "
                                         f"{expected.get('bytes')}", name)
        if _sha(data) != expected.get("sha256"):
            raise ArtifactCorruptError(f"artifact {path}: part {name} does not match its SHA-256 in the manifest "
                                       f"(corrupted or tampered)", name)
    if target is not None and manifest["target"] != target:
        raise ArtifactTargetError(f"artifact {path}: compiled for target {manifest['target']}, the device is {target}; "
                                  f"recompile with target={target!r}", "manifest.target")
    if bind_key is not None and not hmac.compare_digest(str(manifest.get("binding", "")),
                                                        _binding(bind_key, manifest)):
        raise ArtifactBindingError(f"artifact {path}: not bound to this checkpoint (compiled from another one, or "
                                   f"altered after it was written)", "manifest.binding")
    table = json.loads(parts["tensors.json"])["constants"]
    constants = {}
    if parts["weights.safetensors"]:
        from safetensors.numpy import load as st_load
        stored = st_load(parts["weights.safetensors"])
        from trnlab.hardware import dtypes
        for name, entry in table.items():
            a = stored[name]
            if entry["dtype"] != entry["stored_as"]:
                a = a.view(dtypes.SUPPORTED[entry["dtype"]])
            constants[name] = a.reshape(entry["shape"])
    bad = [name for name, a in constants.items() if a.dtype.kind not in "iub" and not np.isfinite(a.astype(np.float32)).all()]
    if bad:
        warnings.warn(f"artifact {path}: {len(bad)} constants hold NaN or infinite values, e.g. {bad[:3]}",
                      NonFiniteConstantsWarning, stacklevel=3)
    graph = Graph.from_json(json.loads(parts["graph.json"]), constants)
    program = LoweredGraph.from_json(json.loads(parts["calls.json"]))
    return Artifact(manifest, graph, program, constants, _executable(manifest, parts, program, path))


def _executable(manifest: dict, parts: dict, lowered: LoweredGraph, path):
    """The stored programs, by the manifest's partitions of core 0 (replayed as stored, not re-traced)."""
    from trnlab.compiler.executable import Executable, partition
    from trnlab.hardware.program import Program
    cut = partition(lowered)
    stored = manifest.get("cores", {}).get("0", {}).get("partitions", [])
    if len(stored) != len(cut) or any(s["kind"] != c.kind for s, c in zip(stored, cut)):
        raise ArtifactCorruptError(f"artifact {path}: the manifest's partitions of core 0 do not match calls.json",
                                   "manifest.cores")
    for entry, part in zip(stored, cut):
        if part.kind == "device":
            try:
                part.program = Program.loads(parts[entry["program"]].decode())
            except (ValueError, KeyError) as e:
                raise ArtifactVersionError(f"artifact {path}: {entry['program']}: {e}", entry["program"]) from None
            part.inputs, part.outputs = list(entry["inputs"]), list(entry["outputs"])
    return Executable(lowered, cut)
