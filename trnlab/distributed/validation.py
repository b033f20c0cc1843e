"""The collective cost model against the textbook and against published measurements.

Textbook: in a ring all-reduce every rank sends 2(p-1)/p of the data in 2(p-1) steps; reduce-scatter
and all-gather send (p-1)/p in p-1 steps; recursive doubling-halving the same bytes in 2·log2 p
steps. The byte counts are taken from the schedules the NumPy collectives record while they sum
real arrays, the time from `collectives.cost`, and both are compared with the closed forms.

Published: AWS's nccom-test guide (tools/neuron-sys-tools/nccom-test, the version for trn1/inf2)
prints example runs on trn1 — "Performance data shown in these examples should not be considered
up-to-date", so they validate orders of magnitude, not the last percent:

- ``nccom-test -r 2 ... --datatype fp32 allr``: 2 ranks (the 2 NeuronCores of one Trainium),
  1 KiB … 1 GiB;
- ``nccom-test -r 32 ... allg``: 32 ranks of one trn1.32xlarge, 1 KiB … 512 KiB;
- ``nccom-test -r 64 -N 2 ... allr``: 64 ranks on two trn1.32xlarge (EFA between them), 8 B … 1 GiB.

Its times are P50 latencies in µs. The model leaves out the runtime's fixed cost per collective
(launch, synchronisation), which these small-message rows show is tens to hundreds of µs; the
"fitted" column adds one fixed cost per group, fitted to that group's smallest row, and says so.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from trnlab.distributed import collectives, topology
from trnlab.distributed.topology import Link

KiB, MiB, GiB = 2**10, 2**20, 2**30


def textbook_rows(sizes_ranks=((2, 64 * KiB), (4, 64 * KiB), (8, 64 * KiB), (16, 64 * KiB))) -> list[dict]:
    """Bytes per rank and steps of the executed algorithms, and modelled time, against the formulas."""
    rows = []
    link = topology.TRN2_48XLARGE
    for p, nbytes in sizes_ranks:
        n = nbytes // 4
        inputs = [np.full(n, float(r), dtype=np.float32) for r in range(p)]
        for op, algorithm, factor, steps in (("all_reduce", "ring", 2 * (p - 1) / p, 2 * (p - 1)),
                                             ("reduce_scatter", "ring", (p - 1) / p, p - 1),
                                             ("all_reduce", "rdh", 2 * (p - 1) / p, 2 * int(math.log2(p)))):
            schedule = collectives.Schedule(algorithm, p)
            if op == "all_reduce":
                out = collectives.all_reduce(inputs, algorithm, schedule)
                assert all(np.array_equal(o, np.full(n, float(sum(range(p))), dtype=np.float32)) for o in out)
            else:
                collectives.reduce_scatter(inputs, algorithm, schedule)
            group = link.group(p)
            modelled = collectives.cost(op, nbytes, group, algorithm).time_ns
            formula = steps * group.intra.hop_latency_ns + factor * nbytes / group.intra.bandwidth * 1e9
            rows.append({"collective": f"{algorithm} {op.replace('_', '-')}", "ranks": p, "bytes": nbytes,
                         "sent per rank (executed)": max(schedule.bytes_sent()), "formula": factor * nbytes,
                         "steps (executed)": len(schedule), "steps (formula)": steps,
                         "time model (µs)": modelled / 1e3, "time formula (µs)": formula / 1e3})
    return rows


# (op, ranks, size in bytes, measured µs) from the nccom-test guide's examples (see the docstring)
PUBLISHED = {
    "2 cores of one Trainium, all-reduce": ("all_reduce", 2, [(1 * KiB, 58), (1 * MiB, 68), (4 * MiB, 107),
                                                              (16 * MiB, 332), (64 * MiB, 1214), (1 * GiB, 18930)]),
    "32 cores of trn1.32xlarge, all-gather": ("all_gather", 32, [(1 * KiB, 151), (8 * KiB, 149), (64 * KiB, 150),
                                                                 (512 * KiB, 179)]),
    "64 cores of 2 × trn1.32xlarge, all-reduce": ("all_reduce", 64, [(8, 520), (1 * KiB, 840), (1 * MiB, 1328),
                                                                     (16 * MiB, 2138), (64 * MiB, 3963),
                                                                     (1 * GiB, 41806)]),
}


def trn1_core_topologies() -> dict[str, topology.Topology]:
    """The rank = one NeuronCore views of trn1 the measurements used: 2 cores of a chip; 32 cores of
    a trn1.32xlarge (a core's share of its chip's NeuronLink, 2 cores per chip: one more hypercube
    dimension); two of those joined by EFA (a core's share of its chip's EFA)."""
    chip = topology.chip_cores(topology.presets.TRN1)
    v2 = topology.NEURONLINK_V2
    per_core = Link("NeuronLink-v2 (per core)", v2.bandwidth / 2, v2.hop_latency_ns, v2.source + "; ÷ 2 cores")
    server = dataclasses.replace(topology.TRN1_32XLARGE, name="trn1.32xlarge (32 cores)", ranks_per_server=32,
                                 intra=per_core, rank_name="core")
    efa = topology.EFA_TRN1
    efa_core = Link("EFA (per core)", efa.bandwidth / 2, efa.hop_latency_ns, efa.source + "; ÷ 2 cores")
    two = dataclasses.replace(server, name="2 × trn1.32xlarge (64 cores)", servers=2, inter=efa_core, inter_kind="efa")
    return {"2 cores of one Trainium, all-reduce": chip, "32 cores of trn1.32xlarge, all-gather": server,
            "64 cores of 2 × trn1.32xlarge, all-reduce": two}


def published_rows() -> list[dict]:
    rows = []
    for label, topo in trn1_core_topologies().items():
        op, ranks, points = PUBLISHED[label]
        modelled = [collectives.best_algorithm(op, size, topo, ranks) for size, _ in points]
        fixed_us = max(0.0, points[0][1] - modelled[0].time_ns / 1e3)  # fitted to the smallest row
        for (size, measured), model in zip(points, modelled):
            t = model.time_ns / 1e3
            rows.append({"case": label, "bytes": size, "algorithm": model.algorithm, "measured (µs)": measured,
                         "model (µs)": t, "measured / model": measured / t,
                         "model + fitted fixed cost (µs)": t + fixed_us,
                         "measured / fitted": measured / (t + fixed_us)})
    return rows


def markdown(rows: list[dict]) -> str:
    """Rows of dicts as a Markdown table (numbers to 3 significant figures)."""
    def cell(v):
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 1e4 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(r[k]) for k in head) + " |" for r in rows]
    return "\n".join(lines)
