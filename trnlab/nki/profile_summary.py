"""`python -m trnlab.nki profile FILE.neff`: the summary `neuron-profile view --output-format
summary-text` prints, in its field names, for a program saved by ``nki.benchmark(save_neff_name=...)``.

Course labs read it after a profiling step (e.g. ``dma_transfer_count``: "The number of DMA
transfers", ``total_time``: "Kernel execution time in seconds"), so the fields keep Neuron's names
and units: times in seconds, sizes in bytes, ``*_percent`` in percent of ``total_time``. The saved
file is trnlab's program JSON (`trnlab.hardware.program`), not a NEFF; the command replays it
timing-only on the preset it was traced for (the simulation is deterministic: the same timeline as
the run that saved it) and computes every field from that timeline:

- ``total_time``: when the last result is ready;
- ``dma_transfer_count``: DMA instructions (one transfer each: AWS's Neuron Explorer guide calls "one
  request to move a block of data, such as a nisa.dma_copy" a DMA transfer); ``dma_transfer_total_bytes``
  the bytes they moved, ``dma_transfer_average_bytes`` per transfer; ``dma_active_time`` the time at
  least one DMA queue was moving data;
- ``<engine>_active_time``: the engine's busy time (its instructions never overlap);
  ``<engine>_instruction_count``; ``matmul_instruction_count`` (Tensor-engine matmuls);
- ``hardware_flops``: the Tensor engine's FLOPs; ``mfu_estimated_percent`` / ``mbu_estimated_percent``:
  trnlab's MFU and MBU (`trnlab.hardware.profile`);
- ``hbm_read_bytes`` / ``hbm_write_bytes``: bytes DMAs read from / wrote to HBM.

Neuron's summary has many more fields (spills, DMA packets, throttling, versions): they are not
printed rather than invented. ``-s TRACE.ntff`` is accepted for the command line's shape; the
trace written by ``save_trace_name`` is the same run's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from trnlab.hardware.program import Program
from trnlab.hardware.records import END, ENGINE, FLOPS, HBM, OPCODE, SBUF, START

ENGINES = {"pe": "tensor_engine", "dve": "vector_engine", "act": "scalar_engine", "pool": "gpsimd_engine"}


def summary(run) -> dict:
    """The neuron-profile summary fields of a run (a `trnlab.nki.KernelRun` or `device.Run`), from
    its timeline; `run.program`, if there is one, tells DMA reads of HBM from writes."""
    timeline, core = run.core.timeline, run.core
    profile = core.profile()
    launch = getattr(run, "launch", None)
    records = timeline.records[launch.first:launch.end] if hasattr(launch, "first") else timeline.records
    engines = timeline.engines
    total_s = profile.total_ns * 1e-9
    fields: dict = {"total_time": total_s}
    dma = [r for r in records if engines[r[ENGINE]].startswith("dma")]
    moved = [_dma_bytes(r) for r in dma]
    fields["dma_transfer_count"] = len(dma)
    fields["dma_transfer_total_bytes"] = int(sum(moved))
    fields["dma_transfer_average_bytes"] = sum(moved) / len(dma) if dma else 0.0
    fields["dma_active_time"] = profile.dma_any_ns * 1e-9
    fields["dma_active_time_percent"] = _percent(profile.dma_any_ns, profile.total_ns)
    for short, name in ENGINES.items():
        mine = [r for r in records if engines[r[ENGINE]] == short]
        busy = sum(r[END] - r[START] for r in mine)
        fields[f"{name}_active_time"] = busy * 1e-9
        fields[f"{name}_active_time_percent"] = _percent(busy, profile.total_ns)
        fields[f"{name}_instruction_count"] = len(mine)
    fields["matmul_instruction_count"] = sum(1 for r in records
                                             if engines[r[ENGINE]] == "pe" and "matmul" in r[OPCODE])
    fields["hardware_flops"] = float(sum(r[FLOPS] for r in records if engines[r[ENGINE]] == "pe"))
    fields["mfu_estimated_percent"] = 100.0 * profile.mfu
    fields["mbu_estimated_percent"] = 100.0 * profile.mbu
    program = getattr(run, "program", None)
    if program is not None:
        fields.update(_hbm_directions(program, records, engines))
    return dict(sorted(fields.items()))


def _dma_bytes(record) -> float:
    """Bytes one DMA record moved: its HBM bytes (one HBM endpoint counted once), else half its SBUF
    bytes (SBUF -> SBUF counts both endpoints)."""
    hbm, sbuf = record[HBM], record[SBUF]
    return float(hbm) if hbm else sbuf / 2


def _hbm_directions(program: Program, records, engines) -> dict:
    """hbm_read_bytes / hbm_write_bytes: the program's DMA instructions, in the order the replay
    issued them, each matched to its record (skipped if the two do not line up)."""
    dmas = [ins for ins in program.instructions if ins.engine.startswith("dma")]
    dma_records = [r for r in records if engines[r[ENGINE]].startswith("dma")]
    if len(dmas) != len(dma_records) or any(i.opcode != r[OPCODE] for i, r in zip(dmas, dma_records)):
        return {}
    memory = {b.id: b.memory for b in program.buffers}
    read = written = 0.0
    for ins, record in zip(dmas, dma_records):
        moved = _dma_bytes(record)
        dst = ins.operands.get("dst")
        sources = [a for name, a in ins.operands.items() if name != "dst"]
        if any(memory.get(a.buffer) == "hbm" for a in sources):
            read += moved
        if dst is not None and memory.get(dst.buffer) == "hbm":
            written += moved
    return {"hbm_read_bytes": int(read), "hbm_write_bytes": int(written)}


def _percent(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def replay(path: str):
    """Replay a saved program timing-only on the preset it was traced for; returns the device Run
    (with `.program` set)."""
    from trnlab.hardware import presets
    from trnlab.hardware.device import Device
    program = Program.load(path)
    target = program.spec
    if target is None:
        target = next((key for key, core in presets.CORES.items() if core.name == program.target), None)
        if target is None:
            raise ValueError(f"{path}: the program was traced for {program.target!r}, which is no trnlab preset")
    device = Device(target, mode="timing", cores=1)
    run = device.run(program, *([None] * len(program.inputs)))
    run.program = program
    run.launch = run
    return run


def format_text(fields: dict) -> str:
    """One field a line, alphabetically, as neuron-profile's summary-text lists them."""
    width = max(len(name) for name in fields)
    return "\n".join(f"{name:<{width}}  {_value(v)}" for name, v in fields.items())


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trnlab.nki profile",
                                     description="neuron-profile's summary fields of a program saved by "
                                                 "nki.benchmark(save_neff_name=...) or nki.profile")
    parser.add_argument("neff", nargs="?", help="the saved program (save_neff_name)")
    parser.add_argument("-n", "--neff", dest="neff_option", help="the saved program, as neuron-profile's -n")
    parser.add_argument("-s", "--session-file", dest="trace", help="the trace (accepted; the program is replayed)")
    parser.add_argument("--output-format", default="summary-text", choices=["summary-text", "summary-json"])
    args = parser.parse_args(argv)
    path = args.neff_option or args.neff
    if not path:
        parser.error("a saved program is needed: profile FILE.neff (or -n FILE.neff)")
    if not os.path.isfile(path):
        print(f"python -m trnlab.nki profile: no file {path!r}", file=sys.stderr)
        return 2
    if args.trace and not os.path.isfile(args.trace):
        print(f"python -m trnlab.nki profile: no trace {args.trace!r}", file=sys.stderr)
        return 2
    try:
        fields = summary(replay(path))
    except (ValueError, KeyError) as error:
        print(f"python -m trnlab.nki profile: {path} is not a program trnlab saved: {error}", file=sys.stderr)
        return 2
    print(json.dumps(fields, indent=2) if args.output_format == "summary-json" else format_text(fields))
    return 0
