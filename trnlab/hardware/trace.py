"""Tracing: record the instructions a kernel issues into a `Program` instead of running them.

A `Recorder` stands in for a `NeuronCore` while a kernel's Python runs (``launch.core``). It has
the core's instruction methods (``nc_matmul``, ``dma_copy``, ... — any public method of the core,
found by name) and its memories. Each instruction call

1. is checked against the hardware rules and costed by a `describe.DescribingCore` behind the
   recorder (so a kernel that breaks a rule fails at its own line), which describes how the
   instruction is to be scheduled instead of timing it, and
2. is appended to the program: opcode, engine, operands as ``Access(buffer, index)``, the other
   parameters as plain data, the kernel line (``note``), the region and that description (what the
   compiled timing replay runs on).

Allocation is *not* decided here: on-chip tiles get a buffer of their own and no address (the
tracing memories only check a tile's shape against the partition and PSUM-bank rules); when each
tile is needed is read off the program afterwards (`allocate.py`), so how long Python keeps a
tile alive no longer matters.
"""
from __future__ import annotations

import inspect
from contextlib import contextmanager

import numpy as np

from . import dtypes, ops
from .describe import DescribingCore, engine_of
from .memory import HBM, OnChipMemory
from .presets import core_spec
from .program import Access, Buffer, Instruction, Program
from .tensor import Tensor, View

_SIGNATURES: dict[str, inspect.Signature] = {}
_RUN_ONLY = {"device_print"}           # recorded, but only done when the program runs


class _TraceOnChip:
    """SBUF or PSUM while tracing: every tile checked for the rules of its shape, none placed."""

    def __init__(self, kind: str, recorder: "Recorder"):
        self.kind = kind
        self._rules = OnChipMemory(kind, recorder.spec, with_data=False)
        self._recorder = recorder
        self.with_data = False
        self.pending = []
        self._checked = {}

    def allocate(self, shape, dtype, name: str | None = None, partition_axis: int = 0,
                 placement: dict | None = None) -> Tensor:
        # the rules depend on shape, dtype and partition axis only: checked once per such tile
        key = (tuple(shape), dtype, partition_axis)
        try:
            checked = self._checked.get(key)
        except TypeError:                       # an unhashable dtype: check every time
            key, checked = None, None
        if checked is None:
            checked = self._rules.check_tile(shape, dtype, name, partition_axis)
            if key is not None:
                self._checked[key] = checked
        shape, dt, partition_axis, _ = checked
        t = Tensor(self, shape, dt, name or self.kind, partition_axis, 0, False)
        self._recorder._add_buffer(t, "internal", placement=placement)
        return t

    def free(self, tensor: Tensor) -> None:
        """Nothing to do: a tile's lifetime is read off the program, not off Python."""

    def flush_pending(self) -> None:
        pass


class _TraceHBM(HBM):
    """HBM while tracing: capacity-checked; each tensor becomes a buffer of the program."""

    def __init__(self, spec, recorder: "Recorder"):
        super().__init__(spec, with_data=False)
        self._recorder = recorder

    def allocate(self, shape, dtype, name: str | None = None, role: str = "internal") -> Tensor:
        t = super().allocate(shape, dtype, name)
        self._recorder._add_buffer(t, role)
        return t

    def alias(self, tensor: Tensor, shape, name: str | None = None, dtype=None) -> Tensor:
        t = super().alias(tensor, shape, name, dtype)
        bid = self._recorder._add_buffer(t, "alias")
        self._recorder.program.buffers[bid].alias_of = self._recorder.buffer_of(tensor)
        return t

    def tensor(self, array, name: str | None = None, dtype=None, copy: bool = True,
               role: str = "constant") -> Tensor:
        """An HBM tensor with contents: called from inside a kernel it is a constant of the
        program (its values are saved with it)."""
        arr = np.asarray(array)
        t = super().tensor(arr, name, dtype)
        data = None if role == "input" else dtypes.cast(arr, t.dtype).copy()
        self._recorder._add_buffer(t, role, data=data)
        return t


class Recorder:
    """Stands in for a NeuronCore while a kernel is traced; `finish()` gives the Program."""

    def __init__(self, spec="trn2", name: str = "kernel"):
        self.spec = spec = core_spec(spec)
        self.mode = "trace"
        self.full = False
        self.name = name
        self.note = ""
        # checks and costs each instruction and describes how it is to be scheduled (no timing)
        self._ids: dict[int, int] = {}        # id(hardware Tensor) -> buffer id
        self._checker = DescribingCore(spec, self._buffer_id, name="trace")
        self.hbm = _TraceHBM(spec, self)
        self.sbuf = _TraceOnChip("sbuf", self)
        self.psum = _TraceOnChip("psum", self)
        self.program = Program(name=name, target=spec.name)
        self.program.spec = spec
        self.program.issue_spec = spec
        self.program.matmul_dtypes = self._checker._matmul_dtypes
        self._tensors: list[Tensor] = []      # kept alive so that ids stay unique
        self._regions: list[str] = []
        self._methods: dict[str, object] = {}
        self.where = lambda: None             # -> (path, line, function) of the kernel line, set by nki

    # -- the buffer table --------------------------------------------------------------------
    def _add_buffer(self, t: Tensor, role: str, placement=None, data=None) -> int:
        bid = len(self.program.buffers)
        self.program.buffers.append(Buffer(
            id=bid, name=t.name, memory=t.kind, shape=tuple(t.shape), dtype=dtypes.name(t.dtype),
            partition_axis=t.partition_axis, role=role, placement=placement, data=data))
        self._ids[id(t)] = bid
        self._tensors.append(t)
        return bid

    def mark_shared(self, t: Tensor) -> None:
        """`t` is an nl.shared_hbm tensor: one tensor for both cores of an LNC=2 launch (shared_hbm.py)."""
        self.program.buffers[self._ids[id(t)]].shared = True

    def _buffer_id(self, t: Tensor) -> int:
        bid = self._ids.get(id(t))
        return self.buffer_of(t) if bid is None else bid

    def buffer_of(self, t: Tensor) -> int:
        bid = self._ids.get(id(t))
        if bid is None:
            raise ValueError(f"tensor {t.name!r} does not belong to this trace")
        return bid

    def input(self, value, name: str) -> Tensor:
        """An HBM tensor for a kernel argument: an array (values come at run time) or a ShapeDtype."""
        shape = tuple(value.shape)
        dtype = value.dtype
        if isinstance(value, np.ndarray) and value.dtype == np.float64:
            dtype = np.float32
        t = _TraceHBM.allocate(self.hbm, shape, dtype, name, role="input")
        self.program.inputs.append((name, self._ids[id(t)]))
        return t

    # -- regions -------------------------------------------------------------------------------
    @contextmanager
    def region(self, name: str):
        self._regions.append(name)
        try:
            yield
        finally:
            self._regions.pop()

    @property
    def current_region(self) -> str:
        regions = self._regions
        return "/".join(regions) if regions else ""

    # -- instructions --------------------------------------------------------------------------
    @property
    def timeline(self):
        return self._checker.timeline

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._checker, name, None)
        if method is None or not callable(method) or not inspect.ismethod(method):
            raise AttributeError(f"a NeuronCore has no instruction {name!r}")
        recorded = self._methods.get(name)
        if recorded is None:
            recorded = self._methods[name] = self._recording(name, method)
        return recorded

    def _recording(self, opcode: str, method):
        signature = _SIGNATURES.get(opcode)
        if signature is None:
            signature = _SIGNATURES[opcode] = inspect.signature(method)
        names = tuple(signature.parameters)     # the method already refused a call that does not bind
        order = {n: i for i, n in enumerate(names)}
        program = self.program
        checker = self._checker

        silent = opcode in _RUN_ONLY
        issued = checker.issued
        engines = checker.engines

        ids = self._ids
        buffers = program.buffers
        instructions = program.instructions
        orders: dict = {}                       # kwargs names as called -> in the signature's order

        def record(*args, **kwargs):
            # the rule checks and the cost; the description of how to schedule it (describe.py)
            i = method(*args, **kwargs)
            issue = issued[i]
            arguments = dict(zip(names, args))
            if kwargs:
                arguments.update(kwargs)
                called = tuple(arguments)
                ordered = orders.get(called)
                if ordered is None:             # in the signature's order, as inspect binds
                    ordered = orders[called] = tuple(sorted(called, key=order.__getitem__))
                if ordered != called:
                    arguments = {name: arguments[name] for name in ordered}
            operands, attrs = {}, {}
            k = len(instructions)
            for pname, value in arguments.items():
                kind = type(value)
                if kind is View:
                    t, index = value.tensor, value.index
                elif kind is Tensor:
                    t, index = value, None
                else:
                    attrs[pname] = plain(value)
                    continue
                bid = ids.get(id(t))
                if bid is None:
                    bid = self.buffer_of(t)     # raises: not a tensor of this trace
                operands[pname] = Access(bid, index)
                buf = buffers[bid]
                if buf.first < 0:
                    buf.first = k
                buf.last = k
            # the description kept as a plain tuple of its fields (loop stamping rebuilds plain
            # tuples; `records.as_description` gives it its class back)
            instructions.append(Instruction(opcode, engine_of(issue, engines), operands, attrs,
                                            self.note, self.current_region, self.where(), tuple(issue)))
            return -1 if silent else k

        record.__name__ = opcode
        record.__doc__ = method.__doc__
        return record

    def finish(self, outputs) -> Program:
        """The program, its outputs given as buffer ids in the kernel's return structure."""
        for ids in _flatten(outputs):
            buf = self.program.buffers[ids]
            if buf.role == "internal":
                buf.role = "output"
        self.program.outputs = outputs
        return self.program


def plain(value):
    """An instruction attribute as plain data (names for operators and engines)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        if type(value).__module__ == "trnlab.nki.loop_index":   # a loop index (nki/loop_index.py): its value
            return int(value)
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    if callable(value):
        return ops.op_name(value)
    raise TypeError(f"instruction attribute {value!r} ({type(value).__name__}) is not plain data")


def _flatten(structure):
    """The buffer ids in a return structure ({"buffer": id, "index": ...} marks a tensor)."""
    if isinstance(structure, dict) and set(structure) == {"buffer", "index"}:
        yield structure["buffer"]
    elif isinstance(structure, (list, tuple)):
        for s in structure:
            yield from _flatten(s)
    elif isinstance(structure, dict):
        for s in structure.values():
            yield from _flatten(s)
