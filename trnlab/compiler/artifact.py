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
"""
from __future__ import annotations

import hashlib
import io
import json
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


def save(compiled, path) -> str:
    """Write `compiled` (a CompiledModel) to `path` as one artifact file; returns the path."""
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
    manifest_bytes = _json(manifest)
    path = str(path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", manifest_bytes)
        for name, data in parts.items():
            z.writestr(name, data)
        z.comment = _sha(manifest_bytes).encode()
    return path


def _read(path) -> tuple[dict, dict]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    if not raw.startswith(b"PK"):
        raise ArtifactTruncatedError(f"not an artifact: {path} does not start like one ({len(raw)} bytes)", "file")
    try:
        z = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile as e:
        raise ArtifactTruncatedError(f"truncated or damaged artifact {path}: {e} ({len(raw)} bytes)", "file") from None
    with z:
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
    except json.JSONDecodeError as e:
        raise ArtifactCorruptError(f"artifact {path}: manifest.json is not JSON ({e})", "manifest.json") from None
    return manifest, parts


def load(path, target: str | None = None) -> Artifact:
    """Read and verify an artifact file; `target` (if given) must be the one it was compiled for."""
    manifest, parts = _read(path)
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
