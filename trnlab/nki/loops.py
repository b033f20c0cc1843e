"""Loop tracing: an `nl.affine_range` / `nl.sequential_range` loop traced in a few iterations, the
others stamped out from them.

Tracing runs a kernel's Python once per input shape; a tiled kernel spends almost all of that
time running the same loop body again and again with another iteration number. In neuronxcc-era
NKI these loops were symbolic for the same reason — AWS's docs say ``affine_range`` and
``sequential_range`` keep the compiler from unrolling the loop until its backend, while
``static_range`` (and, in NKI 0.7 and later, every range) is unrolled while the kernel is traced.

Here a loop of n >= 4 iterations whose body uses its iterator only affinely is traced like this:

1. iterations 0 and 1 run as usual, except that the iterator is a `LoopIndex` — its concrete
   value, which stays a loop index under affine arithmetic (``k * 128 + 64``, ``-k``, sums of loop
   indices). Tensor indexing, ``nl.ds`` and `nl.arange` expressions read the value (`plain`): they
   lead only to access boxes, whose bounds are affine. ``name[k]`` on a Python list is affine when
   the list's entries over the whole loop are tiles in affinely placed buffers (checked entry by
   entry), and so is a comparison whose answer is the same in every iteration of the loops it
   involves (checked on all of them). Any other use (``bool``, comparisons, ``hash``, ``int()``,
   ``range(k)``, ``//``, ``%``, ``str``, floats, a product of two indices) gets the answer an int
   would give, and the loop runs its remaining iterations concretely;
2. the records of the two iterations (instructions with operands, boxes, attributes, source
   lines and their descriptions, and the buffers allocated in the body) are flattened into a
   structure, constants and integers. Same structure and constants required (slice lengths and
   buffer shapes included); the integers (buffer ids, offsets, first/last uses, name counters)
   give ``V0`` and a step ``D``;
3. iterations 2 .. n-2 are stamped out: ``V0 + j * D`` is filled into generated builder functions
   (one per record structure), appended to the program where a concrete trace would put them; the
   allocation name counters advance as they would have;
4. iteration n-1 runs concretely again (so Python variables after the loop hold what they would)
   and must give exactly ``V0 + (n-1) * D``; its rule checks are the far corner's, which is exact
   for affine bounds.

Soundness. Before anything is stamped, every doubt runs the loop concretely from where it is (the
records so far are the concrete trace's): a non-affine use, iterations 0 and 1 differing, plain
Python state carried between them (an ``int``/``float``/``str`` local that changes, a list or dict
whose length changes — but a list each iteration appends its own fresh tile to is extended with the
stamped iterations' tiles), an HBM tensor allocated in the body. After stamping, a surprise — the last
iteration not as predicted, a loop index used after its loop, a ``break`` in the last iteration —
and, at any time, a result pending at an iteration boundary that the next statement assigns
(the boundary issued it into a tile of its own) raises `Retrace`: tracing
is a pure function of the input shapes, so the whole kernel is traced again with that loop (named
by its source line) concrete. An error raised by a trace that stamped is raised by a concrete trace
instead, so messages and kernel lines are today's. `tests/test_trace_loops.py` compares stamped
and concrete traces record for record on every kernel of `trnlab.kernels`; ``TRNLAB_CHECK_LOOPS=1``
(`config.get("check_loops")`) makes every trace do both and compare.

Stamping is a fast path beside the reference (every iteration traced concretely), taken only when
`config.fast()` (``TRNLAB_FAST=0`` turns it off with the other fast paths) and on CPython 3.11, whose
bytecode `loop_index.py` reads; on any other Python every loop is traced concretely. The programs are
the same either way. Modules: `loop_index.py` (the loop variable, the lowest), `loop_records.py`
(flattened records and their generated builders), this one (the trace driver).
"""
from __future__ import annotations

import math
import sys

import numpy as np

from trnlab import config
from trnlab.hardware.program import Access, Buffer, Instruction
from trnlab.nki.runaway import RunawayTrace
from trnlab.nki.loop_index import LoopIndex, Retrace
from trnlab.nki.loop_records import (_bid_slots, _buffer_node, _builder, _instruction_node, _ints, _Mismatch,
                                     _note_stamped_tiles, _reduced_plan, _same_consts)

MIN_ITERATIONS = 4          # fewer: nothing to stamp (iterations 0, 1 and n-1 run concretely)
MAX_RETRACES = 12           # then trace with every loop concrete
STAMPING_PYTHON = (3, 11)   # loop_index reads CPython 3.11 bytecode (`name[k]`): elsewhere, every loop is concrete


def stamping_supported() -> bool:
    """Whether loops may be stamped: the fast paths are on (`config.fast()`) and this is the CPython
    whose bytecode `loop_index` reads. Otherwise every iteration is traced (the reference)."""
    return config.fast() and sys.implementation.name == "cpython" and sys.version_info[:2] == STAMPING_PYTHON


# -- one loop being traced ---------------------------------------------------------------------
def consumed(tracer, value) -> None:
    """Called when a tile is assigned (`out[...] = value`, `acc += value`): if it is the result a
    loop boundary issued and nothing happened since, the concrete trace would have issued it
    straight into the destination — trace that loop concretely."""
    flushed = tracer.flushed
    if flushed[0] is not value:
        return
    tracer.flushed = None
    tile, instructions, buffers, loop = flushed
    program = tracer.program
    if len(program.instructions) == instructions and len(program.buffers) == buffers:
        loop._fail("a functional result pending at an iteration boundary is assigned right after it")


def _plain_value(x):
    t = type(x)
    if t is int or t is float or t is str or t is bool or x is None:
        return True
    if t is tuple:
        return all(_plain_value(e) for e in x)
    return False


def _state(frame) -> dict:
    """What of the loop's frame could carry Python state from one iteration to the next."""
    state = {}
    for name, value in frame.f_locals.items():
        t = type(value)
        if t is list or t is dict or t is set:
            state[name] = (t, len(value))
        elif _plain_value(value):
            state[name] = (t, value)
    return state


def _lists(frame) -> dict:
    """The loop's frame's lists by name: (the list, its length)."""
    return {name: (value, len(value)) for name, value in frame.f_locals.items() if type(value) is list}


_VIEW_FIELDS = ("_owner", "_index", "_ap", "_emit", "_storage", "_valid", "_valid_iterator", "_gather",
                "_rotate", "_block", "_dynamic")


def _fresh_tile(tracer, t):
    """The buffer id of `t` if it is a whole on-chip tile as `nl.ndarray` made it (no view, nothing
    pending, no direct placement), else None."""
    if type(t).__name__ != "NkiTensor" or t.buffer not in ("sbuf", "psum") or t._hw is None:   # (tensor.py is above)
        return None
    if any(getattr(t, f) is not None for f in _VIEW_FIELDS) or t._hw.shape != t.shape:
        return None
    bid = tracer.recorder._ids.get(id(t._hw))
    if bid is None or tracer.program.buffers[bid].placement:
        return None
    return bid


def _stamped_tile(tracer, like, bid: int):
    """The tile object of stamped buffer `bid`: a tile like `like` (iteration 0's) for that buffer."""
    hw0 = like._hw
    Tensor = type(hw0)
    buffer = tracer.program.buffers[bid]
    hw = Tensor(hw0.memory, hw0.shape, hw0.dtype, buffer.name, hw0.partition_axis, 0, False)
    recorder = tracer.recorder
    recorder._ids[id(hw)] = bid
    recorder._tensors.append(hw)                # kept alive, so that ids stay unique
    return type(like).allocation(hw, like.buffer, tracer.launch, shape=like.shape)


class _Records:
    """The flattened records of one iteration: structure, integers, constants."""

    __slots__ = ("nodes", "ints", "consts", "plan")

    def __init__(self, tracer, instructions, buffers):
        ints, consts, nodes = [], [], []
        known = tracer.known
        for r in instructions:
            flat = known.get(id(r))
            if flat is None:
                nodes.append(_instruction_node(r, ints, consts))
            else:
                nodes.append(flat[0])
                ints.extend(flat[1])
                consts.extend(flat[2])
        for b in buffers:
            nodes.append(_buffer_node(b, ints, consts))
        self.nodes, self.ints, self.consts = nodes, ints, consts

    def same_shape(self, other: "_Records") -> bool:
        return self.nodes == other.nodes and _same_consts(self.consts, other.consts)


class Loop:
    """One execution of a stamped loop (its iterations 0, 1 and n-1 run; the others stamped)."""

    def __init__(self, tracer: "LoopTracer", site: tuple, values: range, frame):
        self.tracer, self.site, self.values, self.frame = tracer, site, values, frame
        self.active = True
        self.stamped = False
        self.degraded = None      # why the loop runs concretely after all
        self.current = None       # the iteration running (0, 1 or n-1)
        self.peel = False         # the last iteration is traced concretely, unchecked (loop_index)
        self.marks = []           # per boundary: (instructions, buffers, names)

    def _fail(self, reason: str):
        """After stamping: the stamped records may be wrong, trace the kernel again."""
        self.tracer.poisoned = True
        self.tracer.abandoned.append(self.site)
        raise Retrace((self.site,), reason)

    def degrade(self, reason: str) -> None:
        """Before stamping: run the remaining iterations concretely (the records so far are the
        concrete trace's), and this loop concretely for the rest of the trace."""
        if self.degraded is None:
            self.degraded = reason
            self.tracer.concrete.add(self.site)
            fallbacks.append(((self.site,), reason))

    def _boundary(self):
        launch = self.tracer.launch
        program = self.tracer.program
        pending = launch.pending
        if pending is not None:
            # issue a functional result left pending (the next NKI call would): iterations then
            # start alike. Only an assignment of it as the very next action (`out[...] = t`) would
            # have written it elsewhere; `consumed` catches that and falls back
            launch.flush()
            self.tracer.flushed = (pending, len(program.instructions), len(program.buffers), self)
        self.marks.append((len(program.instructions), len(program.buffers), dict(launch.names)))

    def checked_end(self) -> int:
        """One past the last iteration checked against the prediction (n-1, or n-2 when the last
        iteration is peeled): iterations 2 .. checked_end() - 2 are stamped."""
        return len(self.values) - self.peel

    def index(self, j: int) -> LoopIndex:
        self.current = j
        return LoopIndex(self.values[j], ((self, self.values.step),))

    def begin(self):
        self._boundary()
        self.lists = _lists(self.frame)

    def after_first(self):
        self._boundary()
        self.state = _state(self.frame)
        self.lists1 = _lists(self.frame)

    def after_second(self):
        """Check iterations 0 and 1 against each other, then stamp iterations 2 .. n-2."""
        self._boundary()
        (i0, b0, n0), (i1, b1, n1), (i2, b2, n2) = self.marks
        self.growing = []
        now = _state(self.frame)
        if now != self.state:
            changed = sorted(name for name, v in now.items() if self.state.get(name) != v)
            changed += sorted(name for name in self.state if name not in now)
            self.growing = self._growing(changed, b0, b1)
            if self.growing is None:
                return self.degrade(f"Python state carried between iterations: {', '.join(changed) or '?'}")
        program = self.tracer.program
        buffers = program.buffers
        if any(buffers[b].memory not in ("sbuf", "psum") for b in range(b0, b2)):
            return self.degrade("an HBM tensor allocated in the loop body")
        try:
            first = _Records(self.tracer, program.instructions[i0:i1], buffers[b0:b1])
            second = _Records(self.tracer, program.instructions[i1:i2], buffers[b1:b2])
        except _Mismatch as error:
            return self.degrade(str(error))
        if not first.same_shape(second):
            return self.degrade("iterations 0 and 1 differ in structure or constants")
        if _pe_result_moves_in_banked_psum(program, i0, i1, i2):
            return self.degrade("a Tensor-engine result moves inside a PSUM tensor of several banks")
        step = {}
        for key in set(n1) | set(n2):
            d = n2.get(key, 0) - n1.get(key, 0)
            if d != n1.get(key, 0) - n0.get(key, 0):
                return self.degrade(f"allocation names {key!r} counted differently in iterations 0 and 1")
            if d:
                step[key] = d
        v0 = np.array(first.ints, dtype=np.int64)
        dv = np.array(second.ints, dtype=np.int64) - v0
        # an operand whose buffer changes from one iteration to the next must be a tile of the
        # body (one per iteration); another buffer would need its own first/last use updated
        bids, o = [], 0
        for node in first.nodes[:i1 - i0]:
            bids.extend(o + slot for slot in _bid_slots(node))
            o += _ints(node)
        outside = None
        if bids:
            bids = np.array(bids, dtype=np.int64)
            moving = dv[bids] != 0
            if moving.any():
                starts = v0[bids][moving]
                own = (starts >= b0) & (starts < b1)
                if (dv[bids][moving][own] != b1 - b0).any():
                    return self.degrade("an operand moves to another buffer than the body's own tiles")
                if not own.all():
                    # tiles of a list indexed by the iterator (checked affine by _affine_entries):
                    # their first and last uses move with the stamped iterations
                    outside = bids[moving][~own]
        self.outside_slots = outside
        self.first, self.v0, self.dv, self.name_step = first, v0, dv, step
        n = self.checked_end()      # stamped: iterations 2 .. n-2
        instructions = i1 - i0
        plan = []
        o = 0
        consts = first.consts
        c = 0
        # the constants of each record: the slice of `consts` its builder reads
        for node in first.nodes:
            fn = _builder(node)
            nc = fn.consts
            plan.append((fn, o, tuple(consts[c:c + nc]), node))
            o += fn.ints
            c += nc
        budget = self.tracer.launch.budget          # a runaway loop stops before its records exist
        if budget is not None:
            budget.check_loop(instructions, n - 3, (self.frame.f_code, self.site[1]))
        register = self.tracer.depth > 1           # an enclosing loop will flatten these records
        append_instruction, append_buffer = program.instructions.append, program.buffers.append
        if register or n < 12:
            # inner loops (an enclosing loop flattens their records again) and short loops, where
            # finding the unchanged parts would cost more than it saves
            known = self.tracer.known if register else None
            inst_plan, buf_plan = plan[:instructions], plan[instructions:]
            for j in range(2, n - 1):
                v = (v0 + j * dv).tolist()
                for fn, o, k, node in inst_plan:
                    r = fn(v, o, k)
                    append_instruction(r)
                    if register:
                        known[id(r)] = (node, v[o:o + fn.ints], k)
                for fn, o, k, node in buf_plan:
                    append_buffer(fn(v, o, k))
        else:
            # the outermost stamping loop: parts that do not change between iterations are shared
            # with iteration 0's records (records are never modified), only the others rebuilt,
            # and equal varying parts of its records are built once per iteration (_Template)
            records = program.instructions[i0:i1] + buffers[b0:b1]
            reduced_plan, positions, slots = _reduced_plan(plan, records, v0, dv)
            base, delta = v0[positions], dv[positions]
            inst_plan, buf_plan = reduced_plan[:instructions], reduced_plan[instructions:]
            shared = [None] * slots
            extend_instructions, extend_buffers = program.instructions.extend, program.buffers.extend
            for j in range(2, n - 1):
                v = (base + j * delta).tolist()
                extend_instructions([fn(v, o, k, shared) for fn, o, k in inst_plan])
                extend_buffers([fn(v, o, k, shared) for fn, o, k in buf_plan])
            _note_stamped_tiles(program, plan[instructions:], buffers[b0:b1], v0, dv, n)
        if outside is not None:
            self._touch_outside(outside, first.nodes[:instructions], v0, dv, i0, instructions, buffers)
        for tiles, bid0, entry in self.growing:    # tiles.append(t): the stamped iterations' tiles
            tiles.extend(_stamped_tile(self.tracer, entry, bid0 + j * (b1 - b0)) for j in range(2, n - 1))
        names = self.tracer.launch.names
        for key, d in step.items():
            names[key] = n2.get(key, 0) + (n - 3) * d
        self.stamped = True
        self.tracer.stamped_any = True
        self.expected_names = {key: names.get(key, 0) + d for key, d in step.items()}
        self.marks.append((len(program.instructions), len(program.buffers), None))

    def _growing(self, changed: list, b0: int, b1: int):
        """The lists among the `changed` locals that each iteration appends one tile of its own to
        (``tiles.append(t)``, t a fresh on-chip tile of the body: iteration j's is the body's buffer
        first + j x step): [(list, first buffer id, iteration 0's tile)], or None if any changed
        local is something else."""
        frame_locals = self.frame.f_locals
        found, seen = [], set()
        for name in changed:
            tiles = frame_locals.get(name)
            before, after_first = self.lists.get(name), self.lists1.get(name)
            if type(tiles) is not list or before is None or after_first is None:
                return None
            if before[0] is not tiles or after_first[0] is not tiles:
                return None
            l0 = before[1]
            if after_first[1] != l0 + 1 or len(tiles) != l0 + 2:
                return None
            if id(tiles) in seen:
                return None                     # one list under two names: would be appended to twice
            seen.add(id(tiles))
            e0, e1 = tiles[l0], tiles[l0 + 1]
            bid0, bid1 = _fresh_tile(self.tracer, e0), _fresh_tile(self.tracer, e1)
            if bid0 is None or bid1 is None or not b0 <= bid0 < b1 or bid1 != bid0 + (b1 - b0):
                return None
            if (e0.shape, e0.dtype, e0.buffer) != (e1.shape, e1.dtype, e1.buffer):
                return None
            found.append((tiles, bid0, e0))
        return found

    def _touch_outside(self, slots, nodes, v0, dv, i0, per_iteration, buffers):
        """First and last uses of buffers outside the body that stamped records read."""
        record_of = []                          # int position -> record index in the iteration
        for r, node in enumerate(nodes):
            record_of.extend([r] * _ints(node))
        n = self.checked_end()
        for p in sorted(int(p) for p in slots):
            r = record_of[p]
            for j in range(2, n - 1):
                b = buffers[int(v0[p] + j * dv[p])]
                k = i0 + j * per_iteration + r
                if b.first < 0 or b.first > k:
                    b.first = k
                if b.last < k:
                    b.last = k

    def finish(self):
        """The last iteration ran concretely: it, and iterations 0 and 1, must be as predicted."""
        self._boundary()
        self.active = False
        (i0, b0, _), (i1, b1, _), (i2, b2, _) = self.marks[:3]
        il, bl, _ = self.marks[3]
        ie, be, names = self.marks[4]
        program = self.tracer.program
        n = self.checked_end()          # the iteration checked is n-1 of these
        try:
            last = _Records(self.tracer, program.instructions[il:ie], program.buffers[bl:be])
            again0 = _Records(self.tracer, [], program.buffers[b0:b1])
            again1 = _Records(self.tracer, [], program.buffers[b1:b2])
        except _Mismatch as error:
            self._fail(str(error))
        first = self.first
        if last.nodes != first.nodes or not _same_consts(last.consts, first.consts):
            self._fail("the last iteration differs in structure or constants")
        predicted = self.v0 + (n - 1) * self.dv
        if not np.array_equal(np.array(last.ints, dtype=np.int64), predicted):
            self._fail("the last iteration is not where iterations 0 and 1 predict")
        buffer_ints = len(again0.ints)
        if buffer_ints:
            tail0 = self.v0[len(self.v0) - buffer_ints:]
            tail1 = tail0 + self.dv[len(self.dv) - buffer_ints:]
            if not (np.array_equal(np.array(again0.ints, dtype=np.int64), tail0)
                    and np.array_equal(np.array(again1.ints, dtype=np.int64), tail1)):
                self._fail("a tile of iteration 0 or 1 is used by a later iteration")
        for key, expected in self.expected_names.items():
            if names.get(key, 0) != expected:
                self._fail(f"allocation names {key!r} counted differently in the last iteration")
        for tiles, bid0, _ in self.growing:
            if len(tiles) < n or _fresh_tile(self.tracer, tiles[-1]) != bid0 + (n - 1) * (b1 - b0):
                self._fail("a list the loop appends its tiles to did not get the last iteration's")

    def abandon(self):
        """The loop was left early (break, or an error in its body)."""
        self.active = False
        self.tracer.poisoned = True
        self.tracer.abandoned.append(self.site)


class LoopTracer:
    """Per trace: which loops stamp, the records already flattened, whether to trace again."""

    def __init__(self, recorder, launch, concrete: set):
        self.recorder, self.launch = recorder, launch
        self.program = recorder.program
        self.concrete = concrete          # loop sites to run concretely
        self.depth = 0
        self.known: dict = {}             # id(stamped record) -> (structure, ints, consts)
        self.poisoned = False
        self.stamped_any = False
        self.abandoned: list = []
        self.flushed = None               # (tile, instructions, buffers, loop) issued at a boundary
        self.running: list = []           # the stamping loops the trace is inside, outermost first
        self.off = None                   # why no further loop of this trace stamps

    def iterate(self, values: range, frame):
        """The iterator of an affine/sequential range: stamped, or plain ints when it cannot be."""
        n = len(values)
        site = (frame.f_code.co_filename, frame.f_lineno)
        if n < MIN_ITERATIONS or site in self.concrete or self.off is not None:
            return iter(values)
        return self._stamped(values, site, frame)

    def _stamped(self, values: range, site, frame):
        loop = Loop(self, site, values, frame)
        self.depth += 1
        self.running.append(loop)
        n = len(values)
        done = False
        try:
            loop.begin()
            yield loop.index(0)
            if loop.degraded is None:
                loop.after_first()
            yield loop.index(1) if loop.degraded is None else values[1]
            if loop.degraded is None:
                loop.after_second()                     # stamps 2 .. n-2, or degrades
            if loop.degraded is None:
                yield loop.index(loop.checked_end() - 1)
                loop.finish()
                if loop.peel:                           # the last iteration: traced as it is
                    yield values[n - 1]
            else:
                for j in range(2, n):
                    yield values[j]
            done = True
        finally:
            self.depth -= 1
            self.running.remove(loop)
            loop.frame = None
            loop.active = False
            if not done and loop.stamped:
                loop.abandon()
            if self.depth == 0:
                self.known.clear()


def run_concretely(launch, reason: str) -> None:
    """From here on the trace runs concretely: the loops it is inside run the rest of their
    iterations, and no later loop stamps. Called where stamping, or the retrace a surprise after
    stamping needs, would be unsafe: a direct allocation is placed by the kernel's own address
    arithmetic, often on state outside the kernel — AWS's allocated kernels keep their allocator's
    offset in a module global — so every iteration's body must run, and running the kernel a
    second time would not give the same addresses."""
    tracer = getattr(launch, "loop_tracer", None)
    if tracer is None:
        return
    if tracer.off is None:
        tracer.off = reason
        fallbacks.append(((), f"no loop stamps after {reason}"))
    for loop in tracer.running:
        if loop.stamped:
            loop._fail(reason)          # cannot happen in iterations 0/1; n-1 may meet it first
        loop.degrade(reason)


def iterate(values: range, frame):
    """Called by nl.affine_range / nl.sequential_range: the loop's iterator in the running trace."""
    from trnlab.nki import launches
    launch = launches.active()
    tracer = getattr(launch, "loop_tracer", None) if launch is not None else None
    if tracer is None:
        return iter(values)
    return tracer.iterate(values, frame)


def trace(run_once):
    """Run `run_once(concrete_sites or None)` (None: no stamping) until it gives a program.

    The reference traces every iteration (`run_once(None)`); stamping is its fast path, taken when
    `stamping_supported()`. `run_once` returns the program; a `Retrace` adds the loops it names to the
    concrete ones and starts again. An error raised by a trace that stamped is raised by a fully
    concrete trace instead, so that it is exactly today's error. `config.get("check_loops")` (read
    per trace) does both and fails if they differ."""
    if not stamping_supported():
        return run_once(None)[0]
    if config.get("check_loops"):
        program = _trace_stamping(run_once)
        reference = run_once(None)[0]
        difference = first_difference(program, reference)
        if difference:
            raise AssertionError(f"stamped trace differs from the concrete one: {difference}")
        return program
    return _trace_stamping(run_once)


def _trace_stamping(run_once):
    concrete: set = set()
    del fallbacks[:]
    for _ in range(MAX_RETRACES):
        try:
            program, tracer = run_once(concrete)
        except Retrace as retrace:
            fallbacks.append((retrace.sites, retrace.reason))
            concrete.update(retrace.sites)
            continue
        except RunawayTrace:
            raise                               # tracing again would only run away again
        except Exception as error:
            fallbacks.append(((), f"an error while stamping, traced again concretely: {type(error).__name__}"))
            return run_once(None)[0]
        if tracer.abandoned:
            fallbacks.append((tuple(tracer.abandoned), "a loop left early (break) or a swallowed taint"))
            concrete.update(tracer.abandoned)
            continue
        if tracer.poisoned:
            break
        return program
    fallbacks.append(((), "too many retraces: traced concretely"))
    return run_once(None)[0]


# why the last trace fell back, per retrace: (loop sites, reason) — for tests and for the curious
fallbacks: list = []


def _pe_result_moves_in_banked_psum(program, i0: int, i1: int, i2: int) -> bool:
    """Whether a Tensor-engine instruction of iterations 0 (instructions i0..i1) and 1 (i1..i2) writes
    another region of a PSUM tensor larger than a bank. Whether its result straddles two banks
    (`memory.check_pe_result`) repeats with the bank, not with the far corner the stamped iterations'
    checks rely on, so such a loop is traced concretely (every iteration checked)."""
    spec = getattr(program, "spec", None)
    if spec is None or spec.generation >= "v4":            # no bank rule from NeuronCore-v4
        return False
    buffers, instructions = program.buffers, program.instructions
    for a, b in zip(instructions[i0:i1], instructions[i1:i2]):
        if a.engine != "pe":
            continue
        for wa, wb in zip(a.writes(), b.writes()):
            buffer = buffers[wa.buffer]
            if buffer.memory != "psum":
                continue
            # the unit the allocator places: a block tensor's tile, else the whole tensor
            blocks = math.prod(buffer.shape[:buffer.partition_axis or 0])
            if buffer.partition_bytes // blocks > spec.psum_bank_bytes and not _same(wa.index, wb.index):
                return True
    return False


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is np.ndarray:
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) in (Access, Instruction, Buffer):
        return _same(a.__dict__, b.__dict__)
    if type(a) is float and a != a:
        return b != b
    return a == b


def first_difference(program, reference) -> str:
    """'' if two programs are the same record for record (instructions with their descriptions,
    buffers, inputs, outputs), else where they first differ."""
    for what, a, b in (("instruction", program.instructions, reference.instructions),
                       ("buffer", program.buffers, reference.buffers)):
        if len(a) != len(b):
            return f"{len(a)} {what}s vs {len(b)}"
        for k, (x, y) in enumerate(zip(a, b)):
            if not _same(x, y):
                if what == "instruction":       # with the checked descriptions, which differ too
                    x, y = f"{x} (issue {x.issue})", f"{y} (issue {y.issue})"
                return f"{what} {k}: {x} vs {y}"
    if not _same(program.inputs, reference.inputs) or not _same(program.outputs, reference.outputs):
        return "inputs or outputs"
    return ""
