"""Tile versions: each whole overwrite of a reused SBUF tile starts a new tile (address rotation).

A kernel may declare one SBUF buffer outside its loops and load into it again and again:

    x_sb = nl.ndarray((128, W), dtype, buffer=nl.sbuf)         # once
    for row in nl.sequential_range(H):
        nisa.dma_copy(dst=x_sb, src=x[..., row, :])           # the whole tile, every row
        ... nc_matmul(w, x_sb[:, j:j + n]) ...                   # read by the row's matmuls

Kept at one address, each load must wait until the previous row's matmuls have read the tile (a
write-after-read on the same bytes), and each matmul for its load: DMA and Tensor engine take
turns. A compiler that gives every whole overwrite its own address lets the next row's load run
while this row's matmuls do. Which one a kernel gets is its compile configuration's choice
(`trnlab/nki/compile_config.py`, `flow`), after AWS's pages of 2026-11-13:

- neuronx-cc's flow (the default, ``Allocation.COLORING``) allocates after the trace, and its address
  rotation (``AddressRotation.AUTO``, the default: "the backend may re-place" every address the kernel
  did not fix) re-places such a tile: this module's split. ``AddressRotation.DISABLE`` keeps it.
- NKI allocation (``Allocation.LINEAR``) keeps the kernel's storage — the tuning guide's symptom "A DMA
  load waits for compute that reads the same tensor the load writes, as in a loop that reuses one
  tensor" — unless ``split_reused_buffers=True``, its remedy: this module's split again.

One published measurement supports the split in the default flow: a Stanford CS149 student's fused
convolution (docs/calibration.md, [CS149-student]) declares its input row this way and ran at 90 % MFU
in fp16 on trn2, which a load waiting for every previous matmul cannot do. That the backend's "may
re-place" does so for every whole overwrite is ASSUMED.

`split_versions(program)` makes the split: walking the program in order, an instruction that
writes every element of an allocator-placed SBUF tile (a kernel-internal tile the kernel did not
place itself) — a plain copy, DMA, elementwise or memset instruction, with no predicate, indirection,
skipped rows or accumulation — without reading it, ends the tile's current
version; from there on the program uses a new buffer (same shape and dtype, named ``x~v2``, ...),
whose live range the allocator places like any tile's (trnlab's allocator puts a new tile after
the last one placed, so two versions live at once get different bytes). A partial write keeps the
version (the rest of the tile is still the old value). A slot of an `nl.alloc_stream_buffers` pool
(its buffer's `kernel_slot` flag, `nki/tile_grids.py`) is storage the kernel controls and keeps its one
address: its reuse is the software-pipelining tutorial's lesson. Programs with loops the device runs
(their body held once) and programs that place bytes themselves are left as they are.
`TRNLAB_VERSIONS=0` (`config.override(versions=False)`) keeps every kernel's storage as written, a
what-if beside the default.
"""
from __future__ import annotations

import copy
from collections import Counter

from .program import WRITES, Access, Buffer, Program

_ACCUMULATING = ("accumulate", "acc_flag", "dst_rmw_op")   # attributes that make a write read its destination
# instructions that write every element their destination names; a predicated copy, a scatter, a shuffle, a
# DMA skipping rows out of bounds or an instruction writing every 16th partition leave the rest as it was
_WHOLE_WRITERS = frozenset({"dma_copy", "tensor_copy", "tensor_tensor", "tensor_scalar", "activation", "memset",
                            "iota"})
_PARTIAL_ATTRIBUTES = ("skip", "oob", "pred", "mask")


def _writes_whole(ins) -> bool:
    """Does `ins` write every element of the region its destination names (plain slices everywhere: no
    indirection, no predicate, no skipped rows, no accumulation)?"""
    if ins.opcode not in _WHOLE_WRITERS:
        return False
    if any(value for key, value in ins.attrs.items()
           if key in _ACCUMULATING or any(word in key for word in _PARTIAL_ATTRIBUTES)):
        return False
    for a in ins.operands.values():
        index = a.index if isinstance(a.index, tuple) else (a.index,)
        if not all(i is None or isinstance(i, slice) or type(i).__name__.startswith("int") for i in index):
            return False
    return True


def _covers(access: Access, shape: tuple) -> bool:
    """Does `access` name every element of a buffer of `shape`? (Only plain slices and size-1 integer
    indices are recognised; anything else counts as partial.)"""
    index = access.index
    if index is None:
        return True
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) > len(shape):
        return False
    for i, dim in zip(index, shape):
        if isinstance(i, slice):
            if i.indices(dim) != (0, dim, 1):
                return False
        elif isinstance(i, (int,)) or type(i).__name__.startswith("int"):
            if dim != 1:
                return False
        else:
            return False
    return True


def split_versions(program: Program) -> Program:
    """`program` with each whole overwrite of a reused allocator-placed SBUF tile starting a new
    buffer (module docstring); `program` itself if nothing is split. Not allocated."""
    if program.loops or any(b.placement for b in program.buffers):
        return program
    buffers = program.buffers
    # a tile with a second version is written at least twice: count the writes first (one cheap pass;
    # most programs, AWS's tiled matmul among them, write every tile once)
    writes = Counter(a.buffer for ins in program.instructions for name, a in ins.operands.items() if name in WRITES)
    eligible = {bid for bid, n in writes.items() if n > 1 and buffers[bid].memory == "sbuf"
                and buffers[bid].role == "internal"
                and not getattr(buffers[bid], "kernel_slot", False)}   # a stream-pool slot the kernel reuses
    if not eligible:
        return program
    current: dict[int, int] = {}          # original tile id -> the buffer its current version is
    touched: set[int] = set()             # tiles written or read so far
    added: list[Buffer] = []
    count: dict[int, int] = {}            # original tile id -> versions so far
    rewritten = []
    for k, ins in enumerate(program.instructions):
        new_ins = None
        splits = []
        if _writes_whole(ins):
            reads = {a.buffer for name, a in ins.operands.items() if name not in WRITES}
            for name, a in ins.operands.items():
                if (name in WRITES and a.buffer in eligible and a.buffer in touched and a.buffer not in reads
                        and _covers(a, buffers[a.buffer].shape)):
                    splits.append(a.buffer)
        for bid in splits:
            base = buffers[bid]
            count[bid] = count.get(bid, 1) + 1
            version = Buffer(id=len(buffers) + len(added), name=f"{base.name}~v{count[bid]}", memory="sbuf",
                             shape=base.shape, dtype=base.dtype, partition_axis=base.partition_axis, role="internal")
            added.append(version)
            current[bid] = version.id
        for a in ins.operands.values():
            touched.add(a.buffer)
        if any(a.buffer in current for a in ins.operands.values()):
            new_ins = copy.copy(ins)
            new_ins.operands = {name: Access(current.get(a.buffer, a.buffer), a.index) if a.buffer in current else a
                                for name, a in ins.operands.items()}
            new_ins.issue = None              # described again (its operands changed)
        rewritten.append(new_ins or ins)
    if not added:
        return program
    new = copy.copy(program)
    new.instructions = rewritten
    new.buffers = [copy.copy(b) for b in buffers] + added
    new.read_live_ranges()
    new.allocated = False
    new.changed()
    return new
