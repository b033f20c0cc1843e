"""The compiled training step of the tiny GPT on the simulated Trainium; print the figures.

    python benchmarks/bench_training.py                 # 50 steps, tiny config, fp32 and bf16 matmuls
    python benchmarks/bench_training.py --steps 200     # a longer run (not in CI)
    python benchmarks/bench_training.py --estimate      # also: the checkpoint's recipe on Trn1/Trn2/Trn3

- wall time per simulated training step (full mode: every value computed, instruction by instruction)
  against PyTorch eager on the same CPU, same batches, measured in this run: the simulator's overhead;
- the loss comparison with PyTorch over the run (fp32: largest relative difference; bf16 matmuls:
  the final losses);
- the simulated step: time, MFU, forward / backward / optimizer, FLOPs against 6·N·tokens + attention;
- with --estimate: time and cost of the checkpoint's recipe (4000 x 64 sequences) per generation.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from trnlab.training import AdamWConfig, compile_train_step
from trnlab.training.report import checkpoint_recipe, estimate_training, flops_check, step_report
from trnlab.training.run import run_compiled, run_pytorch, tiny_config, tiny_model, train_batches


def compare(autocast: str, steps: int, batch: int) -> None:
    batches = train_batches(steps, batch, seed=0)
    optimizer = AdamWConfig(lr=3e-3)
    reference = run_pytorch(tiny_model(seed=0), batches, optimizer, autocast=autocast)
    t0 = time.perf_counter()
    step = compile_train_step(tiny_model(seed=0), batches[0], autocast=autocast, optimizer=optimizer)
    compile_s = time.perf_counter() - t0
    compiled = run_compiled(step, batches)
    ref, got = np.array(reference.losses), np.array(compiled.losses)
    sim_wall = statistics.median(compiled.wall_s[1:])        # the first step also traces the program
    eager_wall = statistics.median(reference.wall_s[1:])
    print(f"\n== autocast={autocast}: {steps} steps of batch {batch} x 24 tokens, {tiny_config()}")
    print(f"compile {compile_s:.1f} s (capture {step.times['capture (AOT Autograd)']:.1f} s), "
          f"trace {step.times.get('trace', 0):.1f} s, {len(step.program.instructions)} instructions per step")
    print(f"wall per step: simulated {sim_wall * 1e3:.0f} ms, PyTorch eager {eager_wall * 1e3:.1f} ms "
          f"-> overhead {sim_wall / eager_wall:.0f}x (medians, same run)")
    print(f"loss: first {ref[0]:.4f} / {got[0]:.4f}, last {ref[-1]:.4f} / {got[-1]:.4f} (PyTorch / trnlab); "
          f"largest relative difference {np.max(np.abs(got - ref) / ref):.2e}; "
          f"final within {abs(got[-1] - ref[-1]) / ref[-1]:.2%}")
    print(step_report(compiled.profiles[-1]))
    f = flops_check(step, tiny_config(), compiled.profiles[-1])
    print(f"FLOPs: program {f['program'] / 1e6:.2f} M, 6ND {f['6ND'] / 1e6:.2f} M + attention "
          f"{f['attention'] / 1e6:.2f} M -> ratio {f['ratio']:.3f}")


def estimate() -> None:
    from trnlab.model.checkpoint import load_checkpoint
    model, _ = load_checkpoint()
    recipe = checkpoint_recipe()
    micro = 4
    step = compile_train_step(model, train_batches(1, micro, 0)[0])
    print(f"\n== the checkpoint's recipe: {recipe['steps']} steps x {recipe['batch_size']} sequences "
          f"(micro-batches of {micro}), test accuracy {recipe['test_accuracy']}")
    for e in estimate_training(step, recipe["steps"], recipe["batch_size"]):
        print(e.row())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--estimate", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for autocast in ("none", "matmult"):
        compare(autocast, args.steps, args.batch)
    if args.estimate:
        estimate()


if __name__ == "__main__":
    main()
