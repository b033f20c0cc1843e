"""The compiler's passes, in the order they run; each module has NAME and run(graph, options) -> graph.

    legalise   core ATen -> our ops
    legalise_nn  the ATen ops of students' models (convolution, pooling, batch norm, SDPA, ...) -> our ops
    fold       identities, constant folding, dead code
    convolution  conv2d -> NHWC transpose, im2col, matmul (the layout choice, visible); pooling NHWC
    fuse       attention, matmul + bias + activation -> one op each
    autocast   none | matmult | all (neuronx-cc's --auto-cast)
    layout     weights pre-transposed to [in, out], constant broadcasts stored, int64 -> int32
    broadcasts element-wise ops read a row or column broadcast in place (the kernel's broadcast modes)
    tiling     tile sizes per op (linear: N in balanced tiles of <= 512), recorded in node.attrs["tiles"]
    schedule   the order the ops run in (a producer's consumer right after it where dependencies allow)
    memory     weights resident, activations placed by liveness, intermediates kept in SBUF where a kernel can

`run_pipeline` runs them on a copy of the graph, keeping the graph after every pass and the time each
took (what `explain` prints and the dump directory holds).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from trnlab.compiler.ir import Graph
from trnlab.compiler.passes import (autocast, broadcasts, convolution, fold, fuse, layout, legalise, legalise_nn, memory,
                                   schedule, tiling)

PIPELINE = [legalise, legalise_nn, fold, convolution, fuse, autocast, layout, broadcasts, tiling, schedule, memory]
NAMES = [p.NAME for p in PIPELINE]


@dataclass
class PassRecord:
    name: str
    seconds: float
    graph: Graph                   # the graph after this pass (a copy)

    def __repr__(self) -> str:
        return f"PassRecord({self.name!r}, {self.seconds * 1e3:.2f} ms, {len(self.graph.nodes)} nodes)"


def run_pipeline(graph: Graph, options, stop_after: str | None = None, keep: bool = True) -> tuple[Graph, list]:
    """(graph after the last pass run, [PassRecord per pass]); stops after `stop_after` if given."""
    if stop_after is not None and stop_after not in NAMES:
        raise ValueError(f"stop_after={stop_after!r}: the passes are {NAMES}")
    g = graph.copy()
    records = []
    for p in PIPELINE:
        t0 = time.perf_counter()
        g = p.run(g, options)
        seconds = time.perf_counter() - t0
        records.append(PassRecord(p.NAME, seconds, g.copy() if keep else g))
        if p.NAME == stop_after:
            break
    return g, records
