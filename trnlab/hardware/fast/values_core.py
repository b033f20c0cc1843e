"""The values core: a full-mode NeuronCore that computes values only, beside the timing replay.

A traced program's full-mode replay computes its times with `replay_timing.run_timing` and its
values by issuing each instruction to a `ValuesCore`: the instruction methods run (NeuronCore's
own full-mode steps), but their scheduling step is dropped. The fast-path planner
(`values_replay.py`, `values_order.py`) calls the specialisations below.
"""
from __future__ import annotations

import numpy as np

from .. import onezero as _onezero
from .. import retype as _retype
from ..core import NeuronCore, _view
from ..tensor import View


class ValuesCore(NeuronCore):
    """A full-mode core that only computes values: the instruction methods run (the same NumPy
    code as a checked replay), but their scheduling step is dropped — `run_timing` computes the
    times. Matmuls skip their rule checks and cost (done at trace) and go straight to the values.
    The Scalar engine's reduce registers, the random streams and the registers are the real core's
    (`bind`)."""

    def __init__(self, spec):
        super().__init__(spec, mode="full", name="values")
        self.alias_sources = frozenset()     # ids of the HBM tensors loads may view (run_values)

    def bind(self, core) -> None:
        self._act_regs = core._act_regs
        self._dve_regs = core._dve_regs
        self._system = core._system_state()        # the generators and registers (system.py)
        self._cc_rank = getattr(core, "_cc_rank", 0)  # the rank a register_rank reads (system.py)
        self._cc_lnc = getattr(core, "_cc_lnc", 1)
        rng = getattr(core, "_rng", None)
        if rng is not None:
            self._rng = rng
        elif hasattr(self, "_rng"):
            del self._rng

    def _issue(self, eid, opcode, dur, reads, write, flops=0.0, also_write=None):
        return -1

    def _pe_issue(self, opcode, st, reads, dst, flops, sbuf, psum, tiles=0, attrs=None):
        return -1

    def _schedule_dma(self, dst, src, reads, nbytes, queue, opcode, costed_dst=None) -> int:
        return -1

    def _cost_ns(self, eid, opcode, reads, writes, **attrs) -> float:
        return 0.0

    def nc_matmul(self, dst, stationary, moving, accumulate=None, tile_position=None, tile_size=None,
                  is_stationary_onezero=False, is_moving_onezero=False, stationary_dtype=None,
                  moving_dtype=None) -> int:
        if stationary_dtype or moving_dtype:        # a tile retyped by .view(dtype) (retype.py)
            stationary, moving = _retype.typed_pair(stationary, stationary_dtype, moving, moving_dtype)
        dst, st, mv = _view(dst, "dst"), _view(stationary, "stationary"), _view(moving, "moving")
        if is_stationary_onezero or is_moving_onezero:      # a value rule: checked on each run
            self._check_onezero(st, mv, _onezero.hint_attrs(is_stationary_onezero, is_moving_onezero))
        self._matmul_values(dst, st, mv, st.partitions, st.free_size, mv.free_size, accumulate)
        return -1

    def nc_matmul_starting(self, dst, stationary, moving, accumulate=None, tile_position=None, tile_size=None,
                           is_stationary_onezero=False, is_moving_onezero=False, stationary_dtype=None,
                           moving_dtype=None) -> int:
        """nc_matmul ending a run of matmuls into its PSUM tile that nothing adds to before the
        tile is read (`values_order`): its products start computing in a worker thread now."""
        self.nc_matmul(dst, stationary, moving, accumulate, is_stationary_onezero=is_stationary_onezero,
                       is_moving_onezero=is_moving_onezero, stationary_dtype=stationary_dtype,
                       moving_dtype=moving_dtype)
        t = dst.tensor if type(dst) is View else dst
        t.memory.start_pending(t)
        return -1

    def nc_matmul_ready(self, dst, stationary, moving, accumulate=None, tile_position=None, tile_size=None,
                        is_stationary_onezero=False, is_moving_onezero=False, stationary_dtype=None,
                        moving_dtype=None) -> int:
        """nc_matmul ending a run, followed by one ending another tile's run: its products start
        with that one's, merged with those that share their operands (`memory.start_pending`)."""
        self.nc_matmul(dst, stationary, moving, accumulate, is_stationary_onezero=is_stationary_onezero,
                       is_moving_onezero=is_moving_onezero, stationary_dtype=stationary_dtype,
                       moving_dtype=moving_dtype)
        t = dst.tensor if type(dst) is View else dst
        t.memory.ready(t)
        return -1

    # The most frequent instructions of a tiled kernel, reduced to their values (NeuronCore's own
    # full-mode steps): their rules were checked at trace and do not depend on values, and their
    # operands are the views of a values plan (never freed tiles).
    def dma_copy(self, dst, src, queue=None) -> int:
        self._dma_copy_values(dst, src)
        return -1

    def dma_load_aliasing(self, dst, src, queue=None) -> int:
        """dma_copy of a whole SBUF tile from an HBM tensor no instruction of the program writes,
        into a tile only matmuls read (`_aliasing_loads`): the tile holds a view of the HBM values
        (copy on write, as a deferred matmul's snapshot) instead of a copy, where this run allows."""
        source = src.tensor
        t = dst.tensor
        if (source.written is not None or source.poison is not None) and src.undefined() is not None:
            if t._pending is not None:
                t.reset()
            self._dma_copy_values(dst, src)     # garbage to carry: the reference copy
            return -1
        values = src.values()
        if values.shape != t.shape:
            values = values.reshape(t.shape)
        if values.dtype != t.dtype:             # (a resident tensor of another dtype)
            values = values.astype(t.dtype)
        if t._pending is not None:
            t.reset()                           # (products of an earlier use still computing)
        if id(source) in self.alias_sources:
            t.written_whole(values, shared=True)    # copy on write: the HBM values stay as they are
        else:
            t.written_whole(np.array(values), shared=False)
        return -1

    def tensor_copy_moving(self, dst, src, engine="vector") -> int:
        """tensor_copy of a whole PSUM tile, at its last use, into a whole SBUF tile of the same
        dtype at its first (`_moving_copies`): the SBUF tile takes the PSUM tile's array (the PSUM
        tile is dropped right after) — unless some of it is garbage, then as tensor_copy."""
        t, s = dst.tensor, src.tensor
        values = s.data                         # (waits for its products)
        if s.written is not None or s.poison is not None:
            t.reset()
            self._tensor_copy_values(dst, src)
            return -1
        if t._pending is not None:
            t.reset()
        t.written_whole(values, shared=False)
        s.hand_over()
        return -1

    def tensor_copy(self, dst, src, engine="vector", src_dtype=None, dst_dtype=None) -> int:
        if src_dtype is None and dst_dtype is None:
            self._tensor_copy_values(dst, src)
        else:                                   # a retyped tile (retype.py)
            self._tensor_copy_values(dst, src, _retype.read_as(src, src_dtype, "tensor_copy src", any_size=True),
                                     _retype.read_as(dst, dst_dtype, "tensor_copy dst", any_size=True))
        return -1

    def nc_transpose(self, dst, src, dst_dtype=None, src_dtype=None) -> int:
        if dst_dtype or src_dtype:                  # a tile retyped by .view(dtype) (retype.py)
            dst, src = _retype.typed(dst, dst_dtype, "nc_transpose dst"), _retype.typed(src, src_dtype, "nc_transpose src")
        self._transpose_values(dst, src)
        return -1

    def set_rng_seed(self, seed) -> int:
        self._seed_values(seed)
        return -1
