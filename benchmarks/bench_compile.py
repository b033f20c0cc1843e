"""Compile and run the trained tiny GPT (data/checkpoint) with trnlab.compiler; print the figures.

    python benchmarks/bench_compile.py                  # compile time, forward at batch 1 and 64, per-op on Trn1/2/3
    python benchmarks/bench_compile.py --zoo            # only the model zoo (compile time, wall vs eager)
    python benchmarks/bench_compile.py --all-prompts    # also: logits and greedy answers vs PyTorch, all 2,000 test prompts

- compile time, warm (the second compile in this process): capture (torch.export + core ATen
  decompositions) vs ours (to IR + passes + lowering + tracing every kernel into the one program).
  Target: ours <= torch.export's own time.
- one forward at batch 1 and 64: simulated time (Trn2) and wall time of a replay of the compiled
  program in full mode (values computed) and timing-only mode, against PyTorch eager on the same CPU
  (one thread each; medians of interleaved runs after two warm-up runs, which bind the weights and
  resolve the timing program once). Target: full-mode wall <= 20x eager.
- HBM traffic and simulated time with and without the residual fusion and the SBUF-kept intermediates
  (before/after, batch 64).
- the per-op breakdown (time per op kind, share) on Trn1, Trn2 and Trn3 at batch 64 (timing-only).
- the model zoo (trnlab.compiler.zoo: MLPs, LeNet, ResNet block, Llama block, TransformerEncoderLayer,
  ViT block, the small CNN): compile time (capture and ours), simulated time, and full-mode wall time of
  one forward against PyTorch eager in the same run (medians of interleaved runs). `--zoo` runs only this.
"""
from __future__ import annotations

import argparse
import time

import torch

import trnlab.compiler as tc
from trnlab.model.checkpoint import load_checkpoint


def _ids(model, batch: int) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, model.config.block_size),
                         generator=torch.Generator().manual_seed(0))


def compile_time(model) -> None:
    idx = _ids(model, 1)
    tc.compile(model, (idx,))                                   # cold: imports, first traces
    compiled = tc.compile(model, (idx,))
    t = compiled.times
    capture = t["torch.export"] + t["decompose"]
    ours = t["to IR"] + t["passes"] + t["lower"] + t["trace"]
    print("compile time (warm), tiny GPT at batch 1")
    print(f"  torch.export         {t['torch.export'] * 1e3:8.1f} ms")
    print(f"  core ATen decompose  {t['decompose'] * 1e3:8.1f} ms")
    print(f"  ours: to IR + passes + lower + trace {ours * 1e3:8.1f} ms   = {ours / t['torch.export']:.2f}x "
          f"torch.export (target <= 1x), {ours / capture:.2f}x capture")
    for r in compiled.passes:
        print(f"    {r.name:9s} {r.seconds * 1e3:8.1f} ms")
    print(f"    lower     {t['lower'] * 1e3:8.1f} ms\n    trace     {t['trace'] * 1e3:8.1f} ms   "
          f"(one program: {len(compiled.programs[0].instructions)} instructions)")


def forward(model, repeats: int = 5) -> None:
    import statistics
    print("\none forward (Trn2): simulated time, wall time, PyTorch eager wall time (medians of "
          f"{repeats} interleaved runs, after two warm-up runs)")
    for batch in (1, 64):
        idx = _ids(model, batch)
        compiled = tc.compile(model, (idx,))
        warm = []
        for _ in range(2):          # the first run binds the weights; the first two resolve the timing program
            t0 = time.perf_counter()
            compiled.run(idx)
            warm.append(time.perf_counter() - t0)
        compiled.run(idx, timing_only=True)
        full, timing, eager = [], [], []
        with torch.no_grad():
            model(idx)
            for _ in range(repeats):    # interleaved: a change of the machine's load hits all three alike
                t0 = time.perf_counter()
                run = compiled.run(idx)
                full.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                compiled.run(idx, timing_only=True)
                timing.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                model(idx)
                eager.append(time.perf_counter() - t0)
        f, t, e = (statistics.median(x) for x in (full, timing, eager))
        print(f"  batch {batch:3d}: {len(compiled.programs[0].instructions):6d} instructions   simulated "
              f"{run.profile.total_us:9.1f} us   HBM {run.profile.bytes_by_level['hbm'] / 1e6:7.3f} MB   MFU "
              f"{run.profile.mfu:6.2%}\n             wall full {f * 1e3:8.1f} ms ({f / e:5.1f}x eager, target <= 20x)"
              f"   timing-only {t * 1e3:7.1f} ms   eager {e * 1e3:6.2f} ms   (warm-up runs "
              f"{warm[0] * 1e3:.0f}, {warm[1] * 1e3:.0f} ms)")


def fusion_effect(model) -> None:
    from trnlab.compiler.passes.fuse import fuse_attention, fuse_linear
    print("\nHBM traffic at batch 64 (Trn2, timing-only): before/after the residual fusion and the SBUF-kept "
          "intermediates")
    idx = _ids(model, 64)
    rows = [("no residual fusion, all through HBM", dict(fusions=[fuse_attention, fuse_linear], keep_in_sbuf=False)),
            ("residual adds fused", dict(keep_in_sbuf=False)),
            ("residual fused + layer norms kept in SBUF", dict())]
    for label, options in rows:
        compiled = tc.compile(model, (idx,), **options)
        p = compiled.run(idx, timing_only=True).profile
        kernels = sum(c.kind == "kernel" for c in compiled.program.calls)
        print(f"  {label:42s} {kernels:3d} kernels  HBM {p.bytes_by_level['hbm'] / 1e6:7.3f} MB   "
              f"simulated {p.total_us:8.1f} us")


def per_op(model) -> None:
    print("\nper-op breakdown at batch 64 (timing-only), time per op kind and share")
    idx = _ids(model, 64)
    for target in ("trn1", "trn2", "trn3"):
        compiled = tc.compile(model, (idx,), target=target)
        p = compiled.run(idx, timing_only=True).profile
        parts = ", ".join(f"{op} {ns / 1e3:.1f} us ({ns / p.total_ns:.0%})" for op, ns in p.by_op().items())
        print(f"  {target}: total {p.total_us:8.1f} us, MFU {p.mfu:6.2%}, MBU {p.mbu:6.2%}:  {parts}")


def all_prompts(model, tokenizer) -> None:
    import functools

    from trnlab.compiler.agreement import compare
    from trnlab.data.corpus import load_split
    prompts = [e.prompt for e in load_split("test")]
    for autocast in ("none", "matmult"):
        compiled_for = functools.lru_cache()(lambda b, a=autocast: tc.compile(
            model, (torch.zeros(b, model.config.block_size, dtype=torch.long),), autocast=a))
        t0 = time.perf_counter()
        r = compare(compiled_for, model, tokenizer, prompts, 64)
        print(f"\nautocast={autocast}: {r.identical}/{r.prompts} greedy answers identical ({r.fraction:.2%}), logits "
              f"max |diff| {r.max_abs_error:.3g} = {r.relative_error:.2e} of the largest logit, over {r.positions} "
              f"answer positions ({time.perf_counter() - t0:.0f} s)")


def zoo_models(repeats: int = 3) -> None:
    import statistics

    from trnlab.compiler import zoo
    print("\nmodel zoo (Trn2, one forward): compile time, simulated time, full-mode wall vs PyTorch eager "
          f"(medians of {repeats} interleaved runs after one warm-up run)")
    for name, (model, x) in zoo.zoo().items():
        model.eval()
        tc.compile(model, (x,))                                 # warm: first traces of the kernels
        compiled = tc.compile(model, (x,))
        t = compiled.times
        capture = t["torch.export"] + t["decompose"]
        ours = t["to IR"] + t["passes"] + t["lower"] + t["trace"]
        compiled.run(x)
        full, eager = [], []
        with torch.no_grad():
            for _ in range(repeats):
                t0 = time.perf_counter()
                run = compiled.run(x)
                full.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                model(x)
                eager.append(time.perf_counter() - t0)
        f, e = statistics.median(full), statistics.median(eager)
        kernels = sum(c.kind == "kernel" for c in compiled.program.calls)
        print(f"  {name:17s} compile: capture {capture * 1e3:7.1f} ms, ours {ours * 1e3:7.1f} ms   {kernels:3d} kernels"
              f"   simulated {run.profile.total_us:8.1f} us   wall full {f * 1e3:8.1f} ms = {f / e:7.1f}x eager "
              f"({e * 1e3:.2f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all-prompts", action="store_true", help="compare on all 2,000 test prompts (minutes)")
    parser.add_argument("--zoo", action="store_true", help="only the model zoo")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.zoo:
        zoo_models()
        return
    model, tokenizer = load_checkpoint()
    compile_time(model)
    forward(model)
    fusion_effect(model)
    per_op(model)
    zoo_models()
    if args.all_prompts:
        all_prompts(model, tokenizer)


if __name__ == "__main__":
    main()
