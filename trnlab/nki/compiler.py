"""`nki.compiler`: the directives a kernel gives AWS's compiler — direct allocation and scheduling hints.

Names and parameters follow the NKI API reference (nki.compiler.*, NKI "beta 2" / 0.3+):

- **Direct allocation.** ``nl.ndarray((4, nl.par_dim(128), 512), dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0,
  num_free_tiles=(2,)))`` places each logical (P, F) tile of a block tensor at an address the kernel
  chooses instead of letting the compiler allocate it. `mod_alloc` is modulo allocation: block index
  ``i`` lands on physical tile ``i % num_free_tiles`` (and ``% num_par_tiles`` for partitions, ``%
  num_bank_tiles`` for PSUM banks), so 4 logical tiles over 2 physical ones are double-buffered.
  The objects here are plain data: `address(block_index, partitions, bytes_per_partition)` computes where
  a logical tile goes, and `nl.ndarray` hands the object to the allocator as ``placement=``.
- **Kernel decorators.** `skip_middle_end_transformations`, `enable_stack_allocator`, `force_auto_alloc`
  mark a kernel (the attribute records the directive; the simulator's scheduling is its own).
- **Loop directives.** ``nl.sequential_range(n, directives=ncc.no_reorder())`` and ``ncc.multi_buffer(k)``.
- **Per-kernel configuration.** `CompileConfig`, `SpecializationConfig` and the enums of their options
  (`AddressRotation`, `Allocation`, `AllocationMode`, `SchedulingHeuristic`, `OptLevel`), passed to
  ``nki.jit(compile_config=..., specialization_config=...)`` (`compile_config.py`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from trnlab.nki.compile_config import (AddressRotation, Allocation, AllocationMode, CompileConfig,  # noqa: E402,F401
                                       OptLevel, SchedulingHeuristic, SpecializationConfig)

__all__ = ["CompileConfig", "SpecializationConfig", "AddressRotation", "Allocation", "AllocationMode",
           "SchedulingHeuristic", "OptLevel", "sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator", "force_auto_alloc",
           "no_reorder", "multi_buffer", "ModAlloc", "PsumModAlloc", "CustomAlloc", "AutoAlloc"]


def _linear(shape: tuple[int, ...], index: tuple[int, ...]) -> int:
    """Row-major position of index % shape inside shape (an empty shape is all ones: position 0)."""
    position = 0
    for k, n in enumerate(shape):
        i = index[k] if k < len(index) else 0
        position = position * int(n) + (int(i) % int(n))
    return position


@dataclass(frozen=True)
class ModAlloc:
    """nki.compiler.sbuf.mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=())."""
    base_addr: int
    base_partition: int = 0
    num_par_tiles: tuple[int, ...] = ()
    num_free_tiles: tuple[int, ...] = ()
    memory: str = "sbuf"

    def physical_tiles(self) -> int:
        """How many distinct physical (P, F) tiles the logical blocks rotate over."""
        return math.prod(self.num_par_tiles) * math.prod(self.num_free_tiles)

    def address(self, block: tuple[int, ...], partitions: int, bytes_per_partition: int) -> tuple[int, int]:
        """(start partition, byte offset in each partition) of logical tile `block`."""
        partition = self.base_partition + _linear(self.num_par_tiles, block) * partitions
        offset = self.base_addr + _linear(self.num_free_tiles, block) * bytes_per_partition
        return partition, offset


@dataclass(frozen=True)
class PsumModAlloc:
    """nki.compiler.psum.mod_alloc(*, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(),
    num_par_tiles=(), num_free_tiles=())."""
    base_bank: int
    base_addr: int = 0
    base_partition: int = 0
    num_bank_tiles: tuple[int, ...] = ()
    num_par_tiles: tuple[int, ...] = ()
    num_free_tiles: tuple[int, ...] = ()
    memory: str = "psum"

    def physical_tiles(self) -> int:
        return math.prod(self.num_bank_tiles) * math.prod(self.num_par_tiles) * math.prod(self.num_free_tiles)

    def address(self, block: tuple[int, ...], partitions: int, bytes_per_partition: int) -> tuple[int, int, int]:
        """(bank, start partition, byte offset in the bank) of logical tile `block`."""
        bank = self.base_bank + _linear(self.num_bank_tiles, block)
        partition = self.base_partition + _linear(self.num_par_tiles, block) * partitions
        offset = self.base_addr + _linear(self.num_free_tiles, block) * bytes_per_partition
        return bank, partition, offset


@dataclass(frozen=True)
class CustomAlloc:
    """nki.compiler.sbuf.alloc(func) / psum.alloc(func): func(block_index, pdim_size, fdim_size) gives
    the location of each logical tile ((partition, byte) for SBUF, (bank, partition, byte) for PSUM)."""
    func: Callable
    memory: str

    def address(self, block: tuple[int, ...], partitions: int, bytes_per_partition: int):
        # by keyword, as AWS's compiler calls it: kernels bind extra arguments with functools.partial
        return self.func(idx=tuple(block), pdim_size=partitions, fdim_size=bytes_per_partition)


@dataclass(frozen=True)
class AutoAlloc:
    """nki.compiler.sbuf.auto_alloc() / psum.auto_alloc(): let the compiler allocate (the default)."""
    memory: str


class _Memory:
    """The `ncc.sbuf` / `ncc.psum` namespaces; their `.name` makes them usable as a plain buffer too."""

    def __init__(self, name: str):
        self.name = name

    def mod_alloc(self, *, base_addr: int | None = None, base_partition: int = 0, num_par_tiles: tuple = (),
                  num_free_tiles: tuple = (), base_bank: int | None = None, num_bank_tiles: tuple = ()):
        # AWS's signatures: sbuf.mod_alloc(*, base_addr, ...) and psum.mod_alloc(*, base_bank,
        # base_addr=0, ...) — the first address (SBUF) or bank (PSUM) is required
        if self.name == "psum":
            if base_bank is None:
                raise TypeError("ncc.psum.mod_alloc() needs base_bank= (the first PSUM bank to use)")
            return PsumModAlloc(base_bank=int(base_bank), base_addr=int(base_addr or 0),
                                base_partition=int(base_partition), num_bank_tiles=tuple(num_bank_tiles),
                                num_par_tiles=tuple(num_par_tiles), num_free_tiles=tuple(num_free_tiles))
        if base_bank is not None or num_bank_tiles:
            raise TypeError("ncc.sbuf.mod_alloc() has no banks: base_bank / num_bank_tiles are PSUM parameters")
        if base_addr is None:
            raise TypeError("ncc.sbuf.mod_alloc() needs base_addr= (the byte offset in each partition)")
        return ModAlloc(base_addr=int(base_addr), base_partition=int(base_partition),
                        num_par_tiles=tuple(num_par_tiles), num_free_tiles=tuple(num_free_tiles))

    def alloc(self, func: Callable) -> CustomAlloc:
        return CustomAlloc(func=func, memory=self.name)

    def auto_alloc(self) -> AutoAlloc:
        return AutoAlloc(memory=self.name)

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}"


sbuf, psum = _Memory("sbuf"), _Memory("psum")


# -- kernel decorators ----------------------------------------------------------------------------
def _mark(func, directive: str, value=True):
    # the object decorated only: an @nki.jit kernel (decorated first) keeps its directives on itself, and
    # kernel[grid], with_schedule and nki.jit(compile_config=...) copy them; marking the function it wraps
    # too would give every other kernel of that function the directive
    directives = dict(getattr(func, "nki_directives", {}))
    directives[directive] = value
    try:
        func.nki_directives = directives
    except AttributeError:                # a bound method or builtin: nothing to mark
        pass
    return func


def skip_middle_end_transformations(func):
    """@nki.compiler.skip_middle_end_transformations: the compiler keeps the kernel's instruction order
    and loops as written — trnlab's loop fusion (`trnlab.hardware.fusion`) does not run."""
    return _mark(func, "skip_middle_end_transformations")


def enable_stack_allocator(func=None, *, log_level=None):
    """@nki.compiler.enable_stack_allocator(log_level=...): allocate SBUF/PSUM tiles as a stack."""
    if func is None:
        return lambda f: _mark(f, "enable_stack_allocator", log_level)
    return _mark(func, "enable_stack_allocator", log_level)


def force_auto_alloc(func):
    """@nki.compiler.force_auto_alloc: ignore direct allocations and let the compiler allocate."""
    return _mark(func, "force_auto_alloc")


# -- loop directives ------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopDirective:
    kind: str
    value: int | None = None


def no_reorder() -> LoopDirective:
    """directives=ncc.no_reorder(): keep the loop body's instructions in program order."""
    return LoopDirective("no_reorder")


def multi_buffer(count: int) -> LoopDirective:
    """directives=ncc.multi_buffer(k): rotate the loop's tiles over k buffers."""
    return LoopDirective("multi_buffer", int(count))

