"""The values replay: full mode's values of a checked program, without its scheduling.

Fast path (`trnlab.config.fast()`). The reference computes a replayed program's values as it
computes a traced kernel's: each instruction issued to the full-mode core in program order (rules,
values, cost, issue: `replay.execute`). This path computes the same values on a `ValuesCore` (the
core's own NumPy code with its scheduling step dropped) while `replay_timing.run_timing` computes the
times, from a values plan made once per program (`values_plan`, in the `values_order` of
`values_order.py`) and bound once per values core (`_Prepared`: a tile object per on-chip buffer,
reset at each allocation). tests/test_fast_paths.py checks the timeline and output bits of the
library kernels against the reference; tests/test_values_order.py the ordering rules.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from .. import _blas
from .values_core import ValuesCore
from ..program import locate_instruction
from ..replay import plan
from ..tensor import PrototypeMemory, Tensor, View, fresh_like
from .psum_pool import products
from .values_order import (_WRITES, aliasing_loads, moving_copies, reads_ahead, starting_together,
                           values_order)


def values_ok(program) -> bool:
    """Can full mode compute this program's values beside the compiled timing replay? Not with
    device_print (its output is printed by the instruction, in order)."""
    derived = program.derived
    ok = derived.get("values_ok")
    if ok is None:
        ok = derived.put("values_ok", all(i.opcode != "device_print" for i in program.instructions))
    return ok


def values_plan(program) -> list:
    """The program's steps for `run_values`, resolved once (cached on the program): per step the
    opcode, attributes, operands as (name, buffer id, prototype view: the operand's index parsed
    once on a value-less tensor of the buffer's shape), the tiles it allocates (buffer id,
    prototype tensor, memory), the tiles it frees, the instruction's index in the program and the
    ValuesCore method computing it where not the opcode's (`aliasing_loads`, `moving_copies`, the
    matmuls ending a run in `values_order`). The steps come in `values_order` (program order, or
    program order with PSUM reads moved later)."""
    cached = program.derived.get("values_plan")
    if cached is not None:
        return cached
    buffers = program.buffers
    protos = {}
    for b in buffers:
        kind = PrototypeMemory(b.memory)
        if b.memory == "hbm":
            protos[b.id] = Tensor(kind, b.shape, b.dtype, b.name, None, 0, False)
        else:
            protos[b.id] = Tensor(kind, b.shape, b.dtype, b.name, b.partition_axis, b.offset, False)
    steps = []
    for opcode, attrs, operands, _line, _region, allocs, frees in plan(program).steps:
        ops_ = tuple((name, bid, protos[bid].full if index is None else View(protos[bid], index))
                     for name, bid, index in operands)
        steps.append((opcode, attrs, ops_, tuple((bid, protos[bid], buffers[bid].memory) for bid in allocs),
                      tuple(frees)))
    variants = dict.fromkeys(aliasing_loads(steps, buffers), "dma_load_aliasing")
    variants.update(dict.fromkeys(moving_copies(steps, buffers), "tensor_copy_moving"))
    order, starts = values_order(steps, buffers, reads_ahead())
    variants.update(dict.fromkeys(starts, "nc_matmul_starting"))
    steps = [step + (k, variants.get(k)) for k, step in enumerate(steps)]
    steps = [steps[k] for k in order]
    for p in starting_together(steps):      # their products start with the next run's, merged
        steps[p] = steps[p][:-1] + ("nc_matmul_ready",)
    return program.derived.put("values_plan", steps)




class _Prepared:
    """A program's values plan bound to one values core: a tile (Tensor) per on-chip buffer, made
    once and reset at each allocation, and per step the bound method and the operand views of its
    on-chip operands, built once; only HBM operands (each run's inputs and outputs) are bound per run."""
    __slots__ = ("program", "plan", "steps", "alias_sources", "written_hbm")

    def __init__(self, program, values, memories):
        self.program = program
        self.plan = plan = values_plan(program)     # (bound to this plan: a changed program has another)
        tiles = {}
        steps = []
        alias_sources = set()
        for opcode, attrs, operands, allocs, frees, index, variant in plan:
            loaded = None                   # the tile a load or a moving copy fills: it sets every field itself
            if variant is not None:
                opcode = variant
                if variant not in ("nc_matmul_starting", "nc_matmul_ready"):
                    loaded = next(bid for name, bid, _ in operands if name == "dst")
                if variant == "dma_load_aliasing":
                    alias_sources.update(bid for name, bid, _ in operands if name == "src")
            for bid, proto, memory in allocs:
                if bid not in tiles:
                    tiles[bid] = fresh_like(proto, memories[memory])
                    tiles[bid].drop()
            fixed = dict(attrs)
            per_run = []
            for name, bid, proto in operands:
                if bid in tiles:
                    fixed[name] = proto.on(tiles[bid])
                else:
                    per_run.append((name, bid, proto))
            steps.append((getattr(values, opcode), fixed, tuple(per_run),
                          tuple((tiles[bid], bid == loaded) for bid, _, _ in allocs),
                          tuple(tiles[bid] for bid in frees), index))
        self.steps = steps
        self.alias_sources = tuple(sorted(alias_sources))
        self.written_hbm = tuple(sorted({bid for _, _, operands, *_ in plan
                                         for name, bid, _ in operands
                                         if name in _WRITES and program.buffers[bid].memory == "hbm"}))


_PREPARED_PER_CORE = 32       # programs whose bound plans a values core keeps (serving: prefill + decode buckets)


_bound_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # ValuesCore -> {id(program): _Prepared}
_bound_plans_lock = threading.Lock()


def _prepared(values, program, memories) -> _Prepared:
    """The program's bound plan on this values core (least recently used ones dropped beyond the limit;
    a values core runs one program at a time)."""
    with _bound_plans_lock:
        cache = _bound_plans.setdefault(values, {})
    entry = cache.pop(id(program), None)
    if entry is None or entry.program is not program or entry.plan is not values_plan(program):
        if len(cache) >= _PREPARED_PER_CORE:
            cache.pop(next(iter(cache)))
        entry = _Prepared(program, values, memories)
    cache[id(program)] = entry                   # most recently used last
    return entry


_idle_values_cores: dict = {}       # id(spec) -> (spec, [idle ValuesCore, ...])
_values_cores_lock = threading.Lock()
_IDLE_PER_SPEC = 4


def _take_values_core(spec) -> ValuesCore:
    """An idle values core for `spec`, or a new one. Values cores are shared by every core of a spec
    (one run at a time each: concurrent runs take different ones), so a program's bound plan
    (`_Prepared`) outlives the device it first ran on: `nki.run` makes a fresh device per call, and
    rebinding the 1024^3 tiled matmul's plan each time was a tenth of its run (cProfile)."""
    with _values_cores_lock:
        entry = _idle_values_cores.get(id(spec))
        if entry is not None and entry[0] is spec and entry[1]:
            return entry[1].pop()
    return ValuesCore(spec)


def _give_back_values_core(values: ValuesCore) -> None:
    spec = values.spec
    with _values_cores_lock:
        entry = _idle_values_cores.get(id(spec))
        if entry is None or entry[0] is not spec:
            if len(_idle_values_cores) >= 8:
                _idle_values_cores.pop(next(iter(_idle_values_cores)))
            entry = _idle_values_cores[id(spec)] = (spec, [])
        if len(entry[1]) < _IDLE_PER_SPEC:
            entry[1].append(values)


def run_values(program, core, tensors: dict) -> None:
    """Compute the values of `program` on full-mode `core`: HBM tensors in `tensors` (buffer id ->
    Tensor, from `replay.bind_inputs`); on-chip tiles are a values core's tiles of the program
    (`_Prepared`), each reset to fresh memory (no values written, NaN poison where read unwritten)
    just before its first use and emptied after its last. The core's memories do not book them (the
    timing replay keeps the memories' state)."""
    values = _take_values_core(core.spec)
    try:
        _run_values(program, core, tensors, values, locate_instruction)
    finally:
        _give_back_values_core(values)


def _run_values(program, core, tensors, values, locate_instruction) -> None:
    values.bind(core)
    prepared = _prepared(values, program, {"sbuf": values.sbuf, "psum": values.psum})
    psum = products(values.psum)
    values.alias_sources = _safe_alias_sources(prepared, tensors)
    if values.alias_sources:                    # fp32 casts of the read-only inputs' regions
        arrays = [t._data for t in tensors.values() if id(t) in values.alias_sources]
        psum.start_widening({id(a if a.base is None else a.base): a for a in arrays})
    live = set()
    blas = _blas.single_threaded()              # one switch of BLAS's threads per run, not per PSUM read
    blas.__enter__()
    finished = False
    try:
        for method, fixed, per_run, allocs, frees, k in prepared.steps:
            for t, loaded in allocs:
                if not loaded:
                    t.reset()
                live.add(t)
            if per_run:
                kwargs = dict(fixed)
                for name, bid, proto in per_run:
                    t = tensors[bid]
                    pt = proto.tensor
                    if t.shape == pt.shape and t.dtype == pt.dtype:
                        kwargs[name] = proto.on(t)
                    else:                                 # a resident tensor of another shape
                        kwargs[name] = View(t, proto.index)
            else:
                kwargs = fixed
            try:
                method(**kwargs)
            except Exception as error:
                raise locate_instruction(error, program, k)
            for t in frees:
                t.drop()
                live.discard(t)
        psum.finish_started()
        finished = True
    finally:
        if not finished:
            psum.finish_started(raise_errors=False)
        blas.__exit__(None, None, None)             # after the last product: each ran on one thread
        values.alias_sources = frozenset()
        psum.end_widening()
        for t in live:
            t.drop()
        rng = getattr(values, "_rng", None)
        if rng is not None:
            core._rng = rng


def _safe_alias_sources(prepared, tensors: dict) -> frozenset:
    """The HBM tensors this run's aliasing loads may view (ids): those sharing no memory with a
    tensor the program writes (e.g. a resident tensor and a reshaped alias of it passed as two
    arguments); the other loads copy."""
    if not prepared.alias_sources:
        return frozenset()
    written = [tensors[bid]._data for bid in prepared.written_hbm if tensors[bid]._data is not None]
    safe = set()
    for bid in prepared.alias_sources:
        t = tensors[bid]
        if t._data is not None and t.alias_of is None and not any(np.may_share_memory(t._data, w) for w in written):
            safe.add(id(t))
    return frozenset(safe)


