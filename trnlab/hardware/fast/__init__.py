"""The fast paths: code beside the reference simulator that makes it faster, never different.

Each module here speeds up one part of the reference and is used only while `trnlab.config.fast()`
(the ``fast`` switch: on unless ``TRNLAB_FAST=0``, or ``config.override(fast=False)`` for a block);
with it off, the reference runs alone and gives the same timelines and the same output bits, slower.
docs/programs.md ("Fast paths") lists every fast path with the reference it mirrors and its test.

- `values_replay` (with `values_order`): full mode's values of a replayed program without the
  core's scheduling, beside the compiled timing replay (`replay_timing.run_timing`) — the reference is
  `replay.execute` issuing each instruction to the core;
- `indirect`: the view an indirect DMA (`.ap(scalar_offset= / vector_offset=)`) moves, from the
  view's coordinates with one axis shifted — the reference is `dma._shifted`, every element's flat
  position moved and divided back into coordinates;
- `psum_pool`: deferred PSUM products in worker threads — the reference is
  `memory.OnChipMemory.flush_pending`, one product after another;
- `resolve`: the compiled replay's resolve with its helpers written out — the reference is
  `replay_timing._resolve`;
- `list_schedule`: the list schedule's graph, simulation and reorder without repeated work — the
  reference is `list_schedule.list_order` + `instruction_order.reorder(keep_offsets=True)`.
"""
