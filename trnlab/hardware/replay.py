"""Replay: run an allocated `Program` on a NeuronCore — no Python tracing, no NKI layer.

The program's instructions are issued to the core in order, with the operands its buffer table
names: HBM tensors for the arguments (filled from the caller's arrays), for the outputs and for
constants; SBUF/PSUM tiles placed at their allocated offsets just before their first instruction
and released just after their last, so that the core's hazard tracking sees the same reuse of
bytes the allocation planned. Each instruction keeps its kernel line (the timeline's note) and its
region; the core's timeline records one span per region.

A `Plan` (built once per program, in its derived caches) turns the program into flat lists, so that a
replay costs one method call per instruction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import config
from . import _gc, dtypes
from .allocate import allocate, live_ranges
from .program import Program, locate_instruction
from .tensor import View


@dataclass
class Plan:
    steps: list          # (opcode, attrs, [(name, buffer, index)], line, region, [alloc ids], [free ids])
    hbm: list            # HBM buffers to create before the first instruction


def plan(program: Program) -> Plan:
    cached = program.derived.get("plan")
    if cached is not None:
        return cached
    if not program.allocated:
        allocate(program)
    starts, ends = live_ranges(program)
    steps = []
    for k, ins in enumerate(program.instructions):
        operands = [(name, a.buffer, a.index) for name, a in ins.operands.items()]
        steps.append((ins.opcode, dict(ins.attrs), operands, ins.line, ins.region,
                      [b.id for b in starts.get(k, ())], [b.id for b in ends.get(k, ())]))
    result = Plan(steps=steps, hbm=[b.id for b in program.buffers if b.memory == "hbm"])
    return program.derived.put("plan", result)


def _hbm_buffers(program: Program) -> list:
    """The program's HBM buffers (cached: a program of 8192³ matmul tiles has 130,000 buffers,
    a few of them in HBM; a copy with a buffer table of its own finds its own)."""
    derived = program.derived
    cached = derived.get("hbm")
    if cached is None:
        cached = derived.put("hbm", [b for b in program.buffers if b.memory == "hbm"])
    return cached


def _read_only_inputs(program: Program) -> frozenset:
    """The program's argument buffers that no instruction writes, directly or through an alias
    (cached on the program)."""
    cached = program.derived.get("read_only_inputs")
    if cached is not None:
        return cached
    buffers = program.buffers

    def root(bid):
        while buffers[bid].alias_of is not None:
            bid = buffers[bid].alias_of
        return bid

    written = {root(a.buffer) for ins in program.instructions for a in ins.writes()
               if buffers[a.buffer].memory == "hbm"}
    result = frozenset(bid for _, bid in program.inputs if root(bid) not in written)
    return program.derived.put("read_only_inputs", result)


def bind_inputs(program: Program, core, args: list, hbm_tensors: dict | None = None) -> dict:
    """HBM tensors of the program on `core`: arguments from `args` (arrays, or None in timing
    mode), constants from the program, outputs and scratch uninitialised. `hbm_tensors` may hold
    tensors already on the device (buffer id -> Tensor) to use instead."""
    tensors = dict(hbm_tensors or {})
    inputs = {bid: i for i, (_, bid) in enumerate(program.inputs)}
    for b in _hbm_buffers(program):
        if b.id in tensors:
            continue
        if b.alias_of is not None:
            tensors[b.id] = core.hbm.alias(tensors[b.alias_of], b.shape, name=b.name, dtype=b.dtype)
        elif b.id in inputs:
            value = args[inputs[b.id]]
            if core.full:
                # an input no instruction writes holds the caller's array itself (when it is one
                # of the buffer's dtype, C-contiguous): the launch's HBM tensors end with it
                tensors[b.id] = core.hbm.tensor(value, name=b.name, dtype=b.dtype,
                                                copy=b.id not in _read_only_inputs(program))
            else:
                tensors[b.id] = core.hbm.allocate(b.shape, b.dtype, name=b.name)
        elif b.data is not None:
            tensors[b.id] = core.hbm.tensor(b.data, name=b.name, dtype=b.dtype)
        else:
            tensors[b.id] = core.hbm.allocate(b.shape, b.dtype, name=b.name)
    return tensors


def execute(program: Program, core, args: list, region: str = "", hbm_tensors: dict | None = None,
            checked: bool = False, shared: dict | None = None) -> dict:
    """Run `program` on `core`; returns buffer id -> HBM Tensor.

    The reference: every instruction is issued to the core in program order (its rules checked,
    its values computed, its cost and issue time found), its tiles placed at their allocated
    offsets just before their first instruction and freed after their last.

    Fast path (`trnlab.config.fast()`, unless ``checked=True``): wherever that is exact, the times
    come from the compiled program (`compiled.py`: the same timeline, without the rule checks the
    trace already made) and, in full mode, the values from the values replay
    (`fast/values_replay.py`: the core's NumPy code, without the scheduling).

    A program with loops the device runs (`program.loops`) runs as the straight-line program its
    registers make of it (`dynamic_loops.concrete`): every path below sees each iteration.

    `shared`: buffer id -> the tensor the cores of an LNC=2 launch share for that buffer
    (`shared_hbm.py`). Bound like `hbm_tensors`, but made for this launch only, so the compiled timing
    replay treats them as the program's own buffers (their records are the core's, not the device's)."""
    resident = dict(hbm_tensors or {})
    if shared:
        hbm_tensors = {**resident, **shared}
    if program.loops:
        from .dynamic_loops import concrete
        program = concrete(program, core, args, hbm_tensors)
    if not checked and config.fast():
        from .replay_timing import can_run, compiled_for, run_timing
        from .fast.values_replay import run_values, values_ok
        if not program.allocated:
            allocate(program)
        with _gc.paused():
            compiled = compiled_for(program, core.spec)
        if can_run(compiled, core, resident) and (not core.full or values_ok(program)):
            tensors = bind_inputs(program, core, args, hbm_tensors)
            with _gc.paused():
                if core.full:
                    run_values(program, core, tensors)      # values first: an error leaves no records
                run_timing(compiled, core, resident, region)
            return tensors
    p = plan(program)
    buffers = program.buffers
    tensors = bind_inputs(program, core, args, hbm_tensors)
    memories = {"sbuf": core.sbuf, "psum": core.psum}
    timeline = core.timeline
    first_record = len(timeline.records)
    spans = []                                   # (region, first record, end record)
    current, current_start = None, first_record
    prefix = region + "/" if region else ""
    try:
        for k, (opcode, attrs, operands, line, ins_region, allocs, frees) in enumerate(p.steps):
            for bid in allocs:
                b = buffers[bid]
                tensors[bid] = memories[b.memory].allocate(b.shape, b.dtype, b.name, b.partition_axis,
                                                           offset=b.offset)
            kwargs = dict(attrs)
            for name, bid, index in operands:
                t = tensors[bid]
                kwargs[name] = t.full if index is None else View(t, index)
            if ins_region != current:
                n = len(timeline.records)
                if current:
                    spans.append((prefix + current, current_start, n))
                current, current_start = ins_region, n
            core.note = line
            try:
                getattr(core, opcode)(**kwargs)
            except Exception as error:
                raise locate_instruction(error, program, k)
            for bid in frees:
                b = buffers[bid]
                memories[b.memory].free(tensors.pop(bid))
    finally:
        for bid in [bid for bid in tensors if buffers[bid].memory != "hbm"]:
            memories[buffers[bid].memory].free(tensors.pop(bid))
        n = len(timeline.records)
        if current:
            spans.append((prefix + current, current_start, n))
        timeline.regions.extend(spans)
        if region:
            timeline.regions.append((region, first_record, n))
    return tensors


def read_outputs(program: Program, tensors: dict, full: bool):
    """The program's return structure with each buffer replaced by its values (None in timing mode)."""
    def convert(value):
        if isinstance(value, dict) and set(value) == {"buffer", "index"}:
            if not full:
                return None
            t = tensors[value["buffer"]]
            return (t.full if value["index"] is None else View(t, value["index"])).read()
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value
    return convert(program.outputs)


def argument_array(value, dtype) -> np.ndarray:
    """An argument as a NumPy array of the buffer's dtype."""
    return dtypes.cast(np.asarray(value), dtypes.as_dtype(dtype))
