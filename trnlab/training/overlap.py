"""Where the optimizer's updates go: AdamW per parameter inside the backward, instead of after it.

By default a compiled step issues every AdamW update after the backward's last kernel call, so the
updates are a tail the step waits for. A parameter's gradient is finished much earlier — the last
block's weights first, the embeddings last — and its update could start then, overlapping the rest
of the backward (what PyTorch's `register_post_accumulate_grad_hook` optimizers and DDP's gradient
buckets do on GPUs). This module gives the backward as plain data and replays a step with the
updates placed where you say:

    calls = backward_calls(step)             # [(region, [parameters whose gradient it writes]), ...]
    placement = {"ln_f.weight": "backward/matmul.2", ...}   # each update issued after that call
    profile = simulate_placement(step, placement)           # StepProfile of the replayed step

A placement is legal when every update follows the last call that writes its parameter's gradient
(a tied weight — the token table, also the lm_head — has two). Where it pays to place an update is
what notebook 07's exercise asks.
"""
from __future__ import annotations

from trnlab.training.step import StepProfile, TrainStep


class PlacementError(ValueError):
    """An update placed where its gradient is not finished yet, or a placement that names no call."""


def _producers(step: TrainStep) -> dict:
    """value name -> index of the kernel call that computes it (a view is its input's producer)."""
    made: dict = {}
    for i, call in enumerate(step.calls):
        for name in call.outputs:
            if name is not None:
                made[name] = made.get(call.inputs[0], i) if call.kind == "view" else i
    return made


def backward_calls(step: TrainStep) -> list[tuple[str, list[str]]]:
    """The backward's kernel calls in program order: (region, [parameters whose gradient it writes])."""
    made = _producers(step)
    writes: dict = {}
    for n in step.names:
        for value in step.grad_values[n]:
            writes.setdefault(made[value], []).append(n)
    return [(call.region, writes.get(i, [])) for i, call in enumerate(step.calls)
            if call.kind == "kernel" and call.phase == "backward"]


def ready_after(step: TrainStep) -> dict:
    """parameter -> region of the last call that writes its gradient (the earliest legal place)."""
    ready = {}
    for region, params in backward_calls(step):
        for n in params:
            ready[n] = region
    return ready


def default_placement(step: TrainStep) -> dict:
    """Every update after the backward's last call: what `compile_train_step` does."""
    last = backward_calls(step)[-1][0]
    return {n: last for n in step.names}


def _indices(step: TrainStep, placement: dict) -> dict:
    """The placement as {parameter: call index}, checked: every parameter once, each after its gradient."""
    index = {call.region: i for i, call in enumerate(step.calls) if call.kind == "kernel" and call.phase == "backward"}
    order = {region: k for k, (region, _) in enumerate(backward_calls(step))}
    missing = [n for n in step.names if n not in placement]
    unknown = [n for n in placement if n not in step.names]
    if missing or unknown:
        raise PlacementError(f"placement: expected one region per parameter; missing {missing[:3]}, "
                             f"unknown {unknown[:3]}")
    ready = ready_after(step)
    out = {}
    for n in step.names:
        region = placement[n]
        if region not in index:
            raise PlacementError(f"placement of {n}'s update: {region!r} is not a backward kernel call; "
                                 f"expected one of the regions backward_calls(step) lists")
        if index[region] < index[ready[n]]:
            raise PlacementError(f"update before its gradient: {n}'s AdamW is placed after {region}, but "
                                 f"{ready[n]} ({order[ready[n]] - order[region]} backward calls later) still writes "
                                 f"its gradient; expected {ready[n]} or a later call")
        out[n] = index[region]
    return out


def simulate_placement(step: TrainStep, placement: dict, target: str | None = None) -> StepProfile:
    """The simulated step (timing-only) with each parameter's update issued after the call `placement` names."""
    return step.simulate(target, placement=_indices(step, placement))
