"""Serving on compiled programs: one prefill program per length bucket, one decode program per
(batch bucket, cache bucket), each compiled once by `trnlab.compiler` and then replayed.

As Neuron serving stacks do (NxD Inference compiles a context-encoding and a token-generation model
per bucket), nothing is traced while answering:

    PrefillStep(model)   idx [1, T]                                  -> logits [1, T, V], qkv of each layer [1, T, 3C]
    DecodeStep(model)    ids [B], positions [B], bias [B, L],
                         k_0..k_{n-1}, v_0..v_{n-1} [B, L, C]        -> logits [B, V],    qkv of each layer [B, 3C]

`compile_step` captures one of them with `torch.export` (the compiler's capture), runs the compiler's
passes and lowering (`trnlab.compiler.compile_graph`) and saves the artifact. The decode step's
attention over the cache is the custom op `trnlab::decode_attention` (PyTorch reference:
`trnlab.compiler.ops.decode_attention_reference`); capture keeps it as one node, which becomes the
compiler op `decode_attention`, lowered to the kernel `trnlab.kernels.decode_attention`. The KV cache
is an input of the decode program, and the new keys and values are columns C:3C of each layer's qkv
output, which the caller appends to the cache (so no program writes its inputs).

`CompiledStep.run` replays the lowered program traced as ONE program of the program layer
(`trnlab.compiler.executable.trace_graph`, a region per compiled op) on a fresh one-core device of the
target: the step's simulated time is that program's timeline, kernels overlapping where their
engines and dependencies allow. A step is compiled the first time its bucket is needed, kept for the
life of the process (`_STEPS`), and, with a cache directory, stored there as an artifact file
(`<target>-<kind>-<batch>x<positions>.neff`, keyed by the weights' SHA-256), so the next process
only loads it.

The cache is a convenience, never a way to break serving. An artifact is used only if it is bound to
this checkpoint (an HMAC keyed by the SHA-256 of the config and every weight: `model_digest`, see
trnlab.compiler.artifact) and was compiled for this step's kind, bucket and target (its manifest's
`meta`, and its inputs' shapes); anything else — a damaged file, one for another bucket, weights
altered and re-hashed — is compiled again and overwritten. A cache that cannot be written (read-only,
full) leaves the step in memory only: the request is answered and the problem is kept in
`CompiledBackend.warnings` (shown by /health).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trnlab.model.gpt import GPT
from trnlab.serve.backend import DEFAULT_MAX_BATCH, Backend

TARGETS = ("trn1", "trn2", "trn3")
STEP_FORMAT = "trnlab-serve-step/1"      # bump when PrefillStep / DecodeStep change: old artifacts are not reused


# -- the custom op the decode graph is captured with ----------------------------------------------------------
@torch.library.custom_op("trnlab::decode_attention", mutates_args=())
def _decode_attention_op(qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, bias: torch.Tensor,
                         n_head: int) -> torch.Tensor:
    from trnlab.compiler.ops import decode_attention_reference
    return decode_attention_reference(qkv, k_cache, v_cache, bias, n_head)


@_decode_attention_op.register_fake
def _(qkv, k_cache, v_cache, bias, n_head):
    return qkv.new_empty((qkv.shape[0], qkv.shape[1] // 3))           # [B, C]


# -- the two graphs --------------------------------------------------------------------------------------------
class PrefillStep(torch.nn.Module):
    """The model's own forward on a padded prompt, returning each layer's qkv too (the keys and values)."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor):
        captured = []
        hooks = [block.attn.qkv.register_forward_hook(lambda module, args, out: captured.append(out))
                 for block in self.model.blocks]
        try:
            logits, _ = self.model(idx)                                   # (1, T, V)
        finally:
            for hook in hooks:
                hook.remove()
        return (logits, *captured)                                        # qkv per layer: (1, T, 3C)


class DecodeStep(torch.nn.Module):
    """One new token per sequence against its KV cache (an input): the model's modules, decode attention."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor, *cache: torch.Tensor):
        m = self.model
        n_layer = len(m.blocks)
        keys, values = cache[:n_layer], cache[n_layer:]                   # [B, L, C] each
        x = m.wte(ids) + m.wpe(positions)                                 # (B, C)
        qkvs = []
        for block, k_cache, v_cache in zip(m.blocks, keys, values):
            attn = block.attn
            qkv = attn.qkv(block.ln_1(x))                                 # (B, 3C)
            qkvs.append(qkv)
            y = torch.ops.trnlab.decode_attention(qkv, k_cache, v_cache, bias, attn.n_head)   # (B, C)
            x = x + attn.proj(y)
            x = x + block.mlp(block.ln_2(x))
        return (m.lm_head(m.ln_f(x)), *qkvs)


def example_inputs(model: GPT, kind: str, bucket: tuple[int, int]) -> tuple:
    """Placeholder inputs of one step's shapes (the values do not matter to a compiled graph)."""
    batch, positions = bucket
    config = model.config
    if kind == "prefill":
        if batch != 1:
            raise ValueError(f"prefill runs one prompt: bucket {bucket} has batch {batch}")
        return (torch.zeros(1, positions, dtype=torch.int64),)
    if kind != "decode":
        raise ValueError(f"step kind {kind!r}: 'prefill' or 'decode'")
    cache = [torch.zeros(batch, positions, config.n_embd) for _ in range(2 * config.n_layer)]
    return (torch.zeros(batch, dtype=torch.int64), torch.ones(batch, dtype=torch.int64),
            torch.zeros(batch, positions), *cache)


# -- compiling and caching ---------------------------------------------------------------------------------------
def model_fingerprint(model: GPT) -> str:
    """The first 16 hex digits of `model_digest`: the cache folder of this model's artifacts."""
    return model_digest(model)[:16]


def model_digest(model: GPT) -> str:
    """SHA-256 of the config, every weight and the compiler's version: which artifacts belong to this model."""
    from trnlab.compiler import __version__
    from trnlab.compiler.artifact import FORMAT_VERSION
    h = hashlib.sha256(json.dumps(model.config.to_json(), sort_keys=True).encode() + STEP_FORMAT.encode()
                       + f"compiler {__version__} artifact {FORMAT_VERSION}".encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def default_cache_dir() -> Path:
    """$TRNLAB_CACHE/serve, else ~/.cache/trnlab/serve."""
    from trnlab import config
    root = config.get("cache") or os.path.join(os.path.expanduser("~"), ".cache", "trnlab")
    return Path(root) / "serve"


_CAPTURED: dict[tuple, tuple] = {}    # (fingerprint, kind, bucket) -> (ir.Graph, times): one capture for every target


def capture_step(model: GPT, kind: str, bucket: tuple[int, int], fingerprint: str | None = None):
    """torch.export of one step -> (ir.Graph, capture times); the same graph serves trn1, trn2 and trn3."""
    from trnlab.compiler import capture
    key = (fingerprint or model_fingerprint(model), kind, tuple(bucket))
    if key in _CAPTURED:
        return _CAPTURED[key]
    module = PrefillStep(model) if kind == "prefill" else DecodeStep(model)
    inputs = example_inputs(model, kind, bucket)
    was_training = model.training
    model.eval()
    try:
        graph, times = capture.capture_export(module, inputs, name=f"{kind}_{bucket[0]}x{bucket[1]}")
    finally:
        model.train(was_training)
    for node in graph.nodes:                  # the custom op -> the compiler's op (legalise only reads aten.*)
        if node.op == "trnlab.decode_attention.default":
            n_head = node.attrs["args"][4]
            node.op, node.inputs, node.attrs = "decode_attention", node.inputs[:4], {"n_head": int(n_head)}
    _CAPTURED[key] = (graph, times)
    return graph, times


def compile_step(model: GPT, kind: str, bucket: tuple[int, int], target: str = "trn2", fingerprint: str | None = None):
    """Capture and compile one step (autocast "none": fp32, answers as PyTorch's) -> CompiledModel."""
    from trnlab.compiler.driver import CompileOptions, compile_graph
    graph, times = capture_step(model, kind, bucket, fingerprint)
    return compile_graph(graph, CompileOptions(target=target, autocast="none"), times)   # passes work on a copy


@dataclass
class CompiledStep:
    """One compiled step: the lowered program (from the compiler or its artifact) and its traced replay."""

    kind: str
    bucket: tuple[int, int]
    target: str
    program: object                          # trnlab.compiler.lower.Program
    constants: dict                          # name -> array (the weights, resident in HBM)
    compile_s: float = 0.0                   # wall time to compile (or load) it
    source: str = "compiled"                 # "compiled" | "artifact"
    store_error: str | None = None           # why the artifact could not be written (the step still runs)
    _traced: object = field(default=None, repr=False)
    _arg_names: list = field(default_factory=list, repr=False)   # the traced program's arguments, in order
    _out_names: list = field(default_factory=list, repr=False)   # the values it returns, in order
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def traced(self):
        """The whole step as one program-layer Program (traced once)."""
        with self._lock:
            if self._traced is None:
                from trnlab.compiler.executable import Executable
                env = dict(self.constants)
                for name, shape, dtype in self.program.inputs:
                    env[name] = np.zeros(shape, dtype)
                part = Executable.build(self.program, env).partitions
                if len(part) != 1 or part[0].kind != "device":
                    raise ValueError(f"{self.kind} step {self.bucket}: host ops in the graph; a serving step "
                                     "must run on the device as one program")
                self._arg_names, self._out_names = list(part[0].inputs), list(part[0].outputs)
                self._traced = part[0].program
            return self._traced

    def run(self, *inputs: np.ndarray):
        """Replay on a fresh one-core device of the target -> (outputs tuple, hardware Run)."""
        from trnlab.hardware.device import Device
        program = self.traced()
        env = dict(self.constants)
        for x, (name, shape, dtype) in zip(inputs, self.program.inputs):
            x = np.asarray(x)
            if tuple(x.shape) != tuple(shape):
                raise ValueError(f"{self.kind} step {self.bucket}: input {name} has shape {tuple(x.shape)}, "
                                 f"compiled for {tuple(shape)} (one program per bucket)")
            env[name] = np.ascontiguousarray(x, dtype=dtype)
        run = Device(self.target, cores=1).run(program, *[env[n] for n in self._arg_names])
        outputs = run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)
        by_name = dict(zip(self._out_names, outputs))
        return tuple(by_name[n] for n in self.program.outputs), run


_STEPS: dict[tuple, CompiledStep] = {}       # (fingerprint, target, kind, bucket) -> CompiledStep, per process
_STEPS_LOCK = threading.Lock()


def get_step(model: GPT, kind: str, bucket: tuple[int, int], target: str, cache_dir: Path | None = None,
             fingerprint: str | None = None, digest: str | None = None) -> CompiledStep:
    """The compiled step for this bucket: from this process's cache, the artifact on disk, or compiled now."""
    digest = digest or model_digest(model)
    fingerprint = fingerprint or digest[:16]
    key = (fingerprint, target, kind, tuple(bucket))
    with _STEPS_LOCK:
        step = _STEPS.get(key)
    if step is not None:
        return step
    t0 = time.perf_counter()
    meta = {"step_format": STEP_FORMAT, "kind": kind, "bucket": list(bucket)}
    path = None if cache_dir is None else Path(cache_dir) / fingerprint / f"{target}-{kind}-{bucket[0]}x{bucket[1]}.neff"
    step = None if path is None else _load_step(path, model, kind, bucket, target, meta, digest, t0)
    if step is None:
        compiled = compile_step(model, kind, bucket, target, fingerprint)
        step = CompiledStep(kind, tuple(bucket), target, compiled.program, compiled.constants,
                            time.perf_counter() - t0, "compiled")
        if path is not None:
            step.store_error = _store(compiled, path, meta, digest)
    with _STEPS_LOCK:
        return _STEPS.setdefault(key, step)


def _load_step(path: Path, model: GPT, kind: str, bucket, target: str, meta: dict, digest: str,
               t0: float) -> CompiledStep | None:
    """The artifact at `path` as a step, if it is bound to this model and made for this step; else None."""
    from trnlab.compiler import artifact
    try:
        if not path.is_file():
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", artifact.NonFiniteConstantsWarning)   # a NaN weight fails the binding
            art = artifact.load(path, target=target, bind_key=bytes.fromhex(digest))
    except Exception:          # broken, outdated, tampered, another checkpoint's, unreadable: compile again
        return None
    expected = [tuple(x.shape) for x in example_inputs(model, kind, bucket)]
    if art.manifest.get("meta") != meta or [tuple(shape) for _, shape, _ in art.program.inputs] != expected:
        return None            # a valid artifact of another step (renamed or copied): compile this one
    return CompiledStep(kind, tuple(bucket), target, art.program, art.constants, time.perf_counter() - t0, "artifact")


def _store(compiled, path: Path, meta: dict, digest: str) -> str | None:
    """Write the artifact atomically; the error as text if the cache cannot take it (serving goes on)."""
    from trnlab.compiler import artifact
    tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        artifact.save(compiled, tmp, meta=meta, bind_key=bytes.fromhex(digest))
        os.replace(tmp, path)             # atomic: another process never reads half a file
        return None
    except OSError as error:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return f"the compiled-step cache {path.parent} cannot be written ({type(error).__name__}: {error}); " \
               f"steps are kept in memory only"


# -- the backend -----------------------------------------------------------------------------------------------
def region_times(run) -> list[tuple[str, float]]:
    """(compiled op region, simulated ns from its first instruction's start to its last one's end), in order."""
    t = run.core.timeline
    prefix = run.region + "/"
    spans: dict[str, list[float]] = {}
    records = t.records
    for name, first, end in t.regions:
        if first < run.first or end > run.end or not name.startswith(prefix) or first == end:
            continue
        starts = [records[i][2] for i in range(first, end)]
        ends = [records[i][4] for i in range(first, end)]
        span = spans.setdefault(name[len(prefix):], [min(starts), max(ends)])
        span[0], span[1] = min(span[0], min(starts)), max(span[1], max(ends))
    return [(name, e - s) for name, (s, e) in spans.items()]


class CompiledBackend(Backend):
    """Prefill and decode as compiled programs replayed on the simulated NeuronCore of `target`."""

    name = "compiled"

    def __init__(self, model: GPT, target: str = "trn2", max_batch: int = DEFAULT_MAX_BATCH,
                 cache_dir: Path | str | None = None, keep_runs: bool = False):
        super().__init__(model, max_batch)
        if target not in TARGETS:
            raise ValueError(f"unknown Trainium target {target!r}: choose one of {', '.join(TARGETS)}")
        self.target = self.device = target
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.digest = model_digest(model)
        self.fingerprint = self.digest[:16]
        self.warnings: list[str] = []         # problems that do not stop serving (an unwritable cache)
        self.keep_runs = keep_runs            # keep the last step's hardware Run (timeline, profile)
        self.last_run = None
        self.replay_s = 0.0                   # wall time spent replaying programs (the simulator's overhead)
        self.replays = 0

    def step(self, kind: str, bucket: tuple[int, int]) -> CompiledStep:
        step = get_step(self.model, kind, bucket, self.target, self.cache_dir, self.fingerprint, self.digest)
        if step.store_error and step.store_error not in self.warnings:
            self.warnings.append(step.store_error)
            warnings.warn(step.store_error, RuntimeWarning, stacklevel=2)
        return step

    def warm(self, kinds=("prefill", "decode"), max_batch: int | None = None) -> list[CompiledStep]:
        """Compile (or load) every bucket ahead of the first request; returns the steps."""
        steps = []
        if "prefill" in kinds:
            steps += [self.step("prefill", (1, T)) for T in self.length_buckets]
        if "decode" in kinds:
            steps += [self.step("decode", (B, L)) for B in self.batch_buckets if B <= (max_batch or self.max_batch)
                      for L in self.length_buckets]
        return steps

    def _replay(self, kind: str, bucket: tuple[int, int], *inputs):
        t0 = time.perf_counter()
        outputs, run = self.step(kind, bucket).run(*inputs)
        self.replay_s += time.perf_counter() - t0
        self.replays += 1
        self.last_run = run if self.keep_runs else None
        kernels = region_times(run) if self.keep_runs else []
        return outputs, float(run.latency_ns), kernels

    def _prefill_forward(self, ids: np.ndarray):
        T, C = len(ids), self.config.n_embd
        (logits, *qkvs), ns, kernels = self._replay("prefill", (1, T), ids[None].astype(np.int32))
        qkv = np.stack([q[0] for q in qkvs])                                  # (n_layer, T, 3C)
        return logits[0], qkv[:, :, C:2 * C], qkv[:, :, 2 * C:], ns, kernels

    def _decode_forward(self, ids, positions, keys, values, bias):
        B, n_layer, L, C = keys.shape
        cache = [keys[:, i] for i in range(n_layer)] + [values[:, i] for i in range(n_layer)]   # [B, L, C] each
        (logits, *qkvs), ns, kernels = self._replay("decode", (B, L), ids.astype(np.int32),
                                                    positions.astype(np.int32), bias, *cache)
        qkv = np.stack(qkvs, axis=1)                                          # (B, n_layer, 3C)
        return logits, qkv[:, :, C:2 * C], qkv[:, :, 2 * C:], ns, kernels
