"""Placing AdamW's updates inside the backward (`trnlab.training.overlap`): a placement changes when
each update is issued, never what the step computes; an update before its gradient is refused; the
default placement is the compiled step's own program."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trnlab.nki as nki
from trnlab.hardware.device import Device
from trnlab.training import AdamWConfig, compile_train_step, overlap
from trnlab.training.run import tiny_model, train_batches


@pytest.fixture(scope="module")
def step():
    torch.manual_seed(0)
    batch = train_batches(steps=1, batch_size=2, seed=0)[0]
    return compile_train_step(tiny_model(seed=0), batch, target="trn2", optimizer=AdamWConfig(lr=3e-3)), batch


def _one_call_later(step) -> dict:
    regions = [region for region, _ in overlap.backward_calls(step)]
    return {n: regions[min(regions.index(r) + 1, len(regions) - 1)] for n, r in overlap.ready_after(step).items()}


def test_a_placement_changes_the_order_not_the_values(step):
    step, (idx, targets) = step
    args = step._arguments(idx, targets, 3e-3)
    outputs = []
    for placement in (None, overlap._indices(step, _one_call_later(step))):
        program = nki.trace(step._step_function(placement), *args, target="trn2")
        outputs.append(Device("trn2", mode="full", cores=1).run(program, *args).outputs)
    assert len(outputs[0]) == len(outputs[1]) == 1 + 4 * len(step.names)
    for default, placed in zip(*outputs):
        assert np.array_equal(np.asarray(default), np.asarray(placed))


def test_the_default_placement_is_the_compiled_steps_program(step):
    step, _ = step
    assert overlap.simulate_placement(step, overlap.default_placement(step)).total_ns == step.simulate().total_ns


def test_an_update_before_its_gradient_is_refused_with_the_call_that_still_writes_it(step):
    step, _ = step
    placement = overlap.default_placement(step)
    placement["wte.weight"] = "backward/matmul.0"          # the lm_head's half of the tied gradient only
    with pytest.raises(overlap.PlacementError, match=r"update before its gradient: wte\.weight's AdamW .* "
                                                     r"backward/embedding_backward\.1 \(\d+ backward calls later\)"):
        overlap.simulate_placement(step, placement)


def test_every_parameter_gradient_is_written_by_a_backward_call(step):
    step, _ = step
    written = [n for _, params in overlap.backward_calls(step) for n in params]
    assert set(written) == set(step.names) and written.count("wte.weight") == 2     # tied: lm_head + embedding
