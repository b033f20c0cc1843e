"""Pipeline parallelism: the layers are cut into S stages on S devices; the batch into M microbatches.

Stage s runs forward F(s, m) of microbatch m after stage s-1 sent it m's activations, and backward
B(s, m) after stage s+1 sent back the gradient. Two orders:

- GPipe: all forwards, then all backwards — every stage keeps M microbatches of activations;
- 1F1B: stage s runs S-s-1 forwards to fill the pipe, then alternates one forward, one backward,
  then drains the backwards — at most S-s microbatches in flight, the same bubble.

With forward time f, backward time b and no communication, both take (M + S - 1)(f + b) and every
stage idles (S - 1)(f + b) of it: the **bubble** is (S-1)/(M+S-1) of the step (the textbook figure
the tests check). `schedule` times either order on a `Timeline` (a track per stage: "stage0.pe",
"stage0.cc" for the activation sends), and `microbatch_gradients` runs the real tiny GPT cut into
stages in the 1F1B order and shows that the accumulated gradients equal the one-batch gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trnlab.data.batches import IGNORE_INDEX
from trnlab.distributed import collectives
from trnlab.hardware.timeline import Timeline
from trnlab.model.gpt import GPT


def order(stages: int, microbatches: int, kind: str = "1f1b") -> list[list[tuple[str, int]]]:
    """The op list of every stage: ("F", m) and ("B", m) in the order the stage runs them."""
    if stages < 1 or microbatches < 1:
        raise ValueError(f"a pipeline needs >= 1 stage and >= 1 microbatch, got {stages} and {microbatches}")
    ops = []
    for s in range(stages):
        if kind == "gpipe":
            ops.append([("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)])
            continue
        if kind != "1f1b":
            raise ValueError(f"unknown pipeline schedule {kind!r}; choose '1f1b' or 'gpipe'")
        warmup = min(stages - s - 1, microbatches)
        seq = [("F", m) for m in range(warmup)]
        f, b = warmup, 0
        while b < microbatches:
            if f < microbatches:
                seq.append(("F", f))
                f += 1
            seq.append(("B", b))
            b += 1
        ops.append(seq)
    return ops


@dataclass
class PipelineRun:
    timeline: Timeline
    total_ns: float
    bubble_fraction: float      # idle share of the stages' time on the compute tracks
    peak_in_flight: list[int]   # most microbatches whose activations a stage held at once

    @staticmethod
    def textbook_bubble(stages: int, microbatches: int) -> float:
        return (stages - 1) / (microbatches + stages - 1)


def schedule(stages: int, microbatches: int, forward_ns: float, backward_ns: float, send_ns: float = 0.0,
             kind: str = "1f1b") -> PipelineRun:
    """Time a pipeline step: each stage runs its ops in order, each as soon as its input has arrived."""
    ops = order(stages, microbatches, kind)
    timeline = collectives.new_timeline(stages, ("pe", "cc"), prefix="stage")
    done: dict[tuple[str, int, int], float] = {}  # (op, stage, microbatch) -> when its output arrives downstream
    free = [0.0] * stages
    position = [0] * stages
    in_flight, peak = [0] * stages, [0] * stages
    remaining = sum(len(o) for o in ops)
    while remaining:
        progressed = False
        for s in range(stages):
            if position[s] == len(ops[s]):
                continue
            kind_op, m = ops[s][position[s]]
            if kind_op == "F":
                dep = 0.0 if s == 0 else done.get(("F", s - 1, m))
            else:
                dep = done.get(("F", s, m)) if s == stages - 1 else done.get(("B", s + 1, m))
            if dep is None:
                continue  # its input has not been produced yet: another stage must go first
            start = max(free[s], dep)
            duration = forward_ns if kind_op == "F" else backward_ns
            collectives.issue(timeline, f"stage{s}.pe", f"{'forward' if kind_op == 'F' else 'backward'}",
                              start, duration, note=f"microbatch {m}")
            end = start + duration
            free[s] = end
            sends_to = s + 1 if kind_op == "F" else s - 1
            arrive = end
            if 0 <= sends_to < stages and send_ns > 0:
                collectives.issue(timeline, f"stage{s}.cc", "send", end, send_ns,
                                  note=f"{'activations' if kind_op == 'F' else 'gradients'} of microbatch {m}")
                arrive = end + send_ns
            done[(kind_op, s, m)] = arrive
            in_flight[s] += 1 if kind_op == "F" else -1
            peak[s] = max(peak[s], in_flight[s])
            position[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked: no stage can run its next op")
    total = max(free)
    busy = stages * microbatches * (forward_ns + backward_ns)
    return PipelineRun(timeline, total, 1.0 - busy / (stages * total), peak)


# -- the real model cut into stages ------------------------------------------------------------
def _stage_forward(model: GPT, cuts: list[int], s: int, h: torch.Tensor) -> torch.Tensor:
    """Stage s of the GPT: the embeddings on the first stage, its blocks, the head on the last."""
    if s == 0:
        T = h.shape[1]
        h = model.wte(h) + model.wpe(torch.arange(T))
    for block in model.blocks[cuts[s]:cuts[s + 1]]:
        h = block(h)
    if s == len(cuts) - 2:
        h = model.lm_head(model.ln_f(h))  # logits (b, T, vocab)
    return h


def microbatch_gradients(model: GPT, x: torch.Tensor, y: torch.Tensor, stages: int, microbatches: int) -> float:
    """Run forward and backward of the whole batch as `microbatches` pieces through `stages` stages
    in the 1F1B order (activations and their gradients handed from stage to stage); the gradients
    accumulate in ``p.grad``. Returns the batch's mean loss."""
    n_layer = len(model.blocks)
    if not 1 <= stages <= n_layer:
        raise ValueError(f"cannot cut {n_layer} layers into {stages} stages")
    if x.shape[0] % microbatches:
        raise ValueError(f"{x.shape[0]} rows do not split into {microbatches} microbatches")
    cuts = [round(i * n_layer / stages) for i in range(stages + 1)]
    xs, ys = x.chunk(microbatches), y.chunk(microbatches)
    tokens = int((y != IGNORE_INDEX).sum())
    inputs: dict[tuple[int, int], torch.Tensor] = {}
    outputs: dict[tuple[int, int], torch.Tensor] = {}
    loss_total = 0.0
    # the global order in which the stages' ops complete in the timed 1F1B schedule
    run = schedule(stages, microbatches, 1.0, 2.0)
    events = sorted(run.timeline, key=lambda i: (i.start_ns, i.engine))
    for event in events:
        if not event.engine.endswith(".pe"):
            continue
        s, m = int(event.engine[5:].split(".")[0]), int(event.note.split()[-1])
        if event.opcode == "forward":
            if s == 0:
                h = xs[m]
            else:
                h = outputs[(s - 1, m)].detach().requires_grad_(True)  # "received" activations
            inputs[(s, m)] = h
            outputs[(s, m)] = _stage_forward(model, cuts, s, h)
        else:
            out = outputs.pop((s, m))
            if s == stages - 1:
                logits = out
                loss_sum = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ys[m].reshape(-1),
                                           ignore_index=IGNORE_INDEX, reduction="sum")
                loss_total += float(loss_sum.detach())
                (loss_sum / tokens).backward()
            else:
                out.backward(inputs.pop((s + 1, m)).grad)  # the gradient "sent back" by stage s+1
    return loss_total / tokens
