"""The compiler driver: `compile(model, example_inputs)` -> a CompiledModel you call like the module,
and `explain(...)`.

    capture (torch.export -> core ATen -> ir.Graph)
      -> passes (legalise, fold, fuse, autocast, layout, memory; the graph kept after each)
      -> lower (one kernel call per op) -> LoweredGraph (the calls)
      -> trace (every kernel call inlined into ONE program of the program layer, a region per op:
         executable.py) -> CompiledModel: call it, .graph, .program, .executable, .passes, .save(path),
         .explain()

A CompiledModel runs on chips of its own target (`loaded.py`: constants resident, inputs bound, the
programs replayed, the run profiled); `trnlab.runtime` (a layer above) loads artifact files and
several models onto one chip with the same pieces.

Options mirror neuronx-cc's where one exists: `autocast` is `--auto-cast` ("none" | "matmult" |
"all"), `autocast_type` is `--auto-cast-type` ("bf16" by default), `target` is `--target`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch

from trnlab.compiler import capture, lower
from trnlab.compiler.errors import DynamicShapeError
from trnlab.compiler.executable import Executable, build_executable
from trnlab.compiler.loaded import TARGETS, Chips, LoadedModel
from trnlab.compiler.passes import NAMES, run_pipeline

__version__ = "0.1.0"


@dataclass
class CompileOptions:
    target: str = "trn2"
    autocast: str = "none"
    autocast_type: str = "bf16"
    fallback: bool = False
    fusions: list | None = None            # replace fuse.FUSIONS (e.g. with your own rule)
    stop_after: str | None = None
    dump_dir: str | None = None
    keep_in_sbuf: bool = True              # memory: keep intermediates in SBUF where a fused kernel can


@dataclass
class CompiledModel:
    captured: object                       # ir.Graph straight from capture
    graph: object                          # ir.Graph after the passes
    program: object                        # lower.LoweredGraph (None if stopped before lowering)
    passes: list                           # [PassRecord]
    options: CompileOptions
    times: dict = field(default_factory=dict)
    executable: Executable | None = None   # the traced program(s) (executable.py)
    _chips: object = None
    _loaded: object = None

    @property
    def constants(self) -> dict:
        return self.graph.constants

    def __call__(self, *inputs):
        return self.run(*inputs).outputs

    def run(self, *inputs, timing_only: bool = False):
        """Outputs and the profile of one run on a simulated device of the compiled target."""
        if self.program is None:
            raise RuntimeError(f"compiled with stop_after={self.options.stop_after!r}: there is no program to run")
        self.last_run = self.loaded().run(*inputs, timing_only=timing_only)
        return self.last_run

    def loaded(self):
        """The model loaded on its own simulated device (once): `loaded().run(*inputs)` replays it."""
        if self._loaded is None:
            self._chips = Chips(self.options.target)
            self._loaded = LoadedModel(self._chips, self.graph, self.program, self.constants, self.executable)
        return self._loaded

    @property
    def programs(self) -> list:
        """The traced programs (one per device partition; ONE for a graph without host ops)."""
        return self.executable.programs if self.executable is not None else []

    def save(self, path) -> str:
        from trnlab.compiler import artifact
        return artifact.save(self, path)

    def explain(self, sources: bool = False) -> str:
        return explain_text(self, sources)


def _check_static(example_inputs, dynamic_shapes) -> None:
    if dynamic_shapes:
        raise DynamicShapeError(
            f"dynamic shapes: dynamic_shapes={dynamic_shapes!r} asked for; Neuron compiles one graph per input "
            f"shape (a bucket): compile once per shape you will run", op="dynamic_shapes")


def compile(model: torch.nn.Module, example_inputs, target: str = "trn2", autocast: str = "none",
            autocast_type: str = "bf16", fallback: bool = False, fusions: list | None = None,
            stop_after: str | None = None, dump_dir: str | None = None, dynamic_shapes=None,
            keep_in_sbuf: bool = True) -> CompiledModel:
    """Compile `model` for the shapes of `example_inputs` (a tensor or a tuple) -> CompiledModel."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: one of {TARGETS} (neuronx-cc --target)")
    _check_static(example_inputs, dynamic_shapes)
    example_inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    options = CompileOptions(target, autocast, autocast_type, fallback, fusions, stop_after, dump_dir, keep_in_sbuf)
    was_training = model.training
    model.eval()
    try:
        graph, times = capture.capture_export(model, example_inputs)
    finally:
        model.train(was_training)
    return compile_graph(graph, options, times)


def compile_graph(graph, options: CompileOptions, times: dict | None = None) -> CompiledModel:
    """Run the passes and the lowering on a captured graph (the Dynamo backend comes in here too)."""
    times = dict(times or {})
    final, records = run_pipeline(graph, options, options.stop_after)
    times["passes"] = sum(r.seconds for r in records)
    program = executable = None
    if options.stop_after is None or options.stop_after == NAMES[-1]:
        t0 = time.perf_counter()
        program = lower.lower(final, options.target, options.fallback)
        times["lower"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        executable = build_executable(program, final.constants)
        times["trace"] = time.perf_counter() - t0
    compiled = CompiledModel(graph, final, program, records, options, times, executable)
    if options.dump_dir:
        dump(compiled, options.dump_dir)
    return compiled


def explain_text(compiled: CompiledModel, sources: bool = False) -> str:
    """The pass list with the time each took and the graph's size after it, then the program listing."""
    from trnlab.compiler.passes.memory import summary
    lines = [f"captured: {len(compiled.captured.nodes)} nodes   "
             + "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in compiled.times.items())]
    for r in compiled.passes:
        stats = r.graph.meta.get("pass_stats", {}).get(r.name, "")
        lines.append(f"  {r.name:9s} {r.seconds * 1e3:8.2f} ms   {len(r.graph.nodes):4d} nodes   {stats}")
    from trnlab.compiler.passes import schedule, tiling
    if any("tiles" in n.attrs for n in compiled.graph.nodes):
        lines.append("tiles per op (tiling pass):")
        lines.append(tiling.table(compiled.graph))
    if compiled.graph.meta.get("schedule"):
        lines.append(f"schedule: {' -> '.join(n.name for n in compiled.graph.nodes if n.op not in ('reshape', 'copy'))}")
    lines.append(summary(compiled.graph))
    if compiled.program is not None:
        lines.append(compiled.program.listing() if sources else
                     "\n".join(ln.split("  # ")[0] for ln in compiled.program.listing().splitlines()))
    if compiled.executable is not None:
        lines += [p.describe() for p in compiled.executable.partitions]
    return "\n".join(lines)


def explain(model: torch.nn.Module, example_inputs, **options) -> str:
    """Compile and return the explanation (see `explain_text`); `dump_dir=` also writes every stage."""
    return explain_text(compile(model, example_inputs, **options), sources=True)


def dump(compiled: CompiledModel, directory: str) -> list[str]:
    """Write the graph after capture and after every pass (as text), the pass times and the program
    listing into `directory`, like TORCH_COMPILE_DEBUG's dumps; returns the file names. Pictures of
    the graphs are `trnlab.viz.graph.dump_pictures(compiled, directory)` (viz sits above the compiler)."""
    os.makedirs(directory, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        with open(os.path.join(directory, name), "w") as f:
            f.write(text + "\n")
        written.append(name)

    put("00_captured.txt", compiled.captured.to_text())
    for i, r in enumerate(compiled.passes, start=1):
        put(f"{i:02d}_{r.name}.txt", r.graph.to_text())
    put("passes.txt", "\n".join(f"{r.name:9s} {r.seconds * 1e3:.3f} ms" for r in compiled.passes))
    if compiled.program is not None:
        put("calls.txt", compiled.program.listing())
    for i, p in enumerate(compiled.programs):
        put(f"program.part{i}.txt" if len(compiled.programs) > 1 else "program.txt", p.listing(limit=None))
    return written
