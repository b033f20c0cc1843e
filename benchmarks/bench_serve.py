"""Benchmark serving: simulated latency per generation, server throughput, wall overhead per token.

    python benchmarks/bench_serve.py                 # all parts except the full test split (about a minute)
    python benchmarks/bench_serve.py --full-split    # also: greedy answers on the simulated trn2 over all
                                                     # 2,000 test prompts equal PyTorch's (several minutes)

0. Compile once: every prefill bucket and the decode buckets up to batch 8 on trn2 (trnlab.compiler),
   then the same buckets loaded from their artifact files (what the next process does).
1. Simulated TTFT / TPOT / end-to-end and output tokens/s at batch 1 and 8 on Trn1, Trn2, Trn3
   (B identical requests arriving together; each step's time from its compiled program's timeline).
2. Server requests/s at concurrency 8 and 32 (a real HTTP server on 127.0.0.1, running every step on
   the simulated trn2), against the same server on the PyTorch backend (baseline, same run).
3. Wall-clock overhead of the simulator per generated token: one short answer through the engine on
   trn2 against the PyTorch backend (baseline). Target: a short answer within 1 s of wall time.
5. Soak (`--soak`): sustained requests against a server on 127.0.0.1 (bounded: `--soak-requests`,
   `--soak-seconds`), resident memory (RSS) sampled every 50 requests, each run in a fresh process:
   trn2 as shipped (full collections scheduled by the collector pause, trnlab.hardware._gc), trn2
   with that schedule off (`_gc.COLLECTION_EVERY` infinite: the memory growth it stops), and
   the PyTorch backend as shipped.
"""
from __future__ import annotations

import argparse
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from trnlab.data import load_split
from trnlab.data.tasks import model_prompt, read_answer, task_of
from trnlab.model import ask_many, load_checkpoint
from trnlab.serve import steps
from trnlab.serve.backend import make_backend
from trnlab.serve.engine import generate
from trnlab.serve.http import BackgroundServer
from trnlab.serve.latency import latency_table
from trnlab.serve.service import Service

PROMPTS = ["12+5", "407+38", "999-1", "reverse kite", "sort 52819", "35+56", "reverse ab", "sort 000"]


def compile_once(model, cache_dir: str) -> None:
    print("0. compile once, replay many times (trn2, prefill 1x{8,16,32}, decode {1..8}x{8,16,32})")
    steps._STEPS.clear()
    steps._CAPTURED.clear()
    start = time.perf_counter()
    steps = steps.CompiledBackend(model, "trn2", max_batch=8, cache_dir=cache_dir).warm()
    compile_s = time.perf_counter() - start
    steps._STEPS.clear()
    steps._CAPTURED.clear()
    start = time.perf_counter()
    loaded = steps.CompiledBackend(model, "trn2", max_batch=8, cache_dir=cache_dir).warm()
    load_s = time.perf_counter() - start
    assert all(s.source == "artifact" for s in loaded)
    print(f"   {len(steps)} programs compiled in {compile_s:.1f} s ({compile_s / len(steps):.1f} s each); "
          f"loaded from their artifacts in {load_s:.2f} s")


def simulated_latency(model, tokenizer) -> None:
    print("1. simulated latency, B identical requests of 'sort 52819' arriving together")
    print(f"   {'device':6s} {'batch':>5s} {'TTFT µs':>9s} {'TPOT µs':>9s} {'E2E µs':>9s} {'out tok/s':>10s}")
    for row in latency_table(model, tokenizer.encode_prompt("sort 52819"), tokenizer.eos_id, batches=(1, 8)):
        print(f"   {row.device:6s} {row.batch:5d} {row.ttft_ms * 1e3:9.1f} {row.tpot_ms * 1e3:9.1f} "
              f"{row.e2e_ms * 1e3:9.1f} {row.output_tokens_per_s:10.0f}")


def server_throughput(model, tokenizer, concurrency: int, device: str, total: int) -> float:
    service = Service(device, max_batch=8, model=model, tokenizer=tokenizer)
    if hasattr(service.backend, "warm"):
        service.backend.warm(max_batch=8)                        # compiled before the clock starts
    with BackgroundServer(service) as url:
        def one(i):
            body = json.dumps({"model": service.model_name, "prompt": PROMPTS[i % len(PROMPTS)]}).encode()
            request = urllib.request.Request(url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as response:
                return json.loads(response.read())["choices"][0]["text"]
        one(0)                                                   # warm up
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            answers = list(pool.map(one, range(total)))
        seconds = time.perf_counter() - start
    assert len(answers) == total
    return total / seconds


def wall_per_token(model, tokenizer, device: str) -> tuple[float, float, int, float]:
    """(wall s of one answer, wall s per token, tokens, wall s replaying programs per token): median of 5."""
    service = Service(device, max_batch=1, model=model, tokenizer=tokenizer)
    service.ask("407+38")                                        # warm up: its buckets compiled (or loaded)
    runs = []
    for _ in range(5):
        replay_before = getattr(service.backend, "replay_s", 0.0)
        answer = service.ask("407+38")
        runs.append((answer.wall_s, getattr(service.backend, "replay_s", 0.0) - replay_before))
    service.stop()
    wall_s, replay_s = sorted(runs)[len(runs) // 2]
    n = len(answer.request.output_ids)
    return wall_s, wall_s / n, n, replay_s / n


def rss_mb() -> float:
    """This process's resident memory in MB (Linux: /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def soak(model, tokenizer, device: str, requests: int, seconds: float, collect: bool, concurrency: int = 8) -> dict:
    """Sustained requests (at most `requests`, stopped after `seconds`); RSS sampled every 50 requests."""
    import gc

    from trnlab.hardware import _gc
    if not collect:
        _gc.COLLECTION_EVERY = float("inf")   # the defect of issue 24: no full collection ever
    gc.collect()
    service = Service(device, max_batch=8, model=model, tokenizer=tokenizer)
    if hasattr(service.backend, "warm"):
        service.backend.warm(max_batch=8)
    with BackgroundServer(service) as url:
        def one(i):
            body = json.dumps({"model": service.model_name, "prompt": PROMPTS[i % len(PROMPTS)]}).encode()
            request = urllib.request.Request(url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())["choices"][0]["text"]
        for i in range(2 * concurrency):                         # warm up: every bucket used once
            one(i)
        samples, done, start = [(0, rss_mb())], 0, time.perf_counter()
        runs, run_s = _gc.full_collections, _gc.full_collection_s
        with ThreadPoolExecutor(concurrency) as pool:
            while done < requests and time.perf_counter() - start < seconds:
                batch = min(50, requests - done)
                list(pool.map(one, range(done, done + batch)))
                done += batch
                samples.append((done, rss_mb()))
        wall = time.perf_counter() - start
    first, last = samples[0][1], samples[-1][1]
    return {"device": device, "collect": collect, "requests": done, "wall_s": wall,
            "gc_runs": _gc.full_collections - runs, "gc_s": _gc.full_collection_s - run_s, "rss_start_mb": first,
            "rss_end_mb": last, "rss_max_mb": max(m for _, m in samples), "per_request_kb": (last - first) * 1024 / done,
            "samples": samples}


def soak_report(requests: int, seconds: float) -> None:
    """Each soak in a fresh process (one run's garbage must not be the next one's baseline)."""
    import subprocess
    import sys
    print(f"5. soak: {requests} requests at concurrency 8 (at most {seconds:.0f} s each), RSS of a fresh process "
          f"(server and clients) after warm-up")
    for device, collect in (("trn2", False), ("trn2", True), ("cpu", True)):
        command = [sys.executable, __file__, "--soak-one", device, "--soak-requests", str(requests),
                   "--soak-seconds", str(seconds)] + ([] if collect else ["--soak-no-collect"])
        r = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
        label = f"{device}, {'as shipped' if collect else 'no full collections (the defect)'}"
        print(f"   {label:45s} {r['requests']} requests in {r['wall_s']:.0f} s: RSS {r['rss_start_mb']:.0f} -> "
              f"{r['rss_end_mb']:.0f} MB (max {r['rss_max_mb']:.0f}), {r['per_request_kb']:+.0f} kB per request; "
              f"{r['gc_runs']} full collections of the pause, {r['gc_s']:.2f} CPU s")
        print("      RSS MB after n requests: " + " ".join(f"{n}:{m:.0f}" for n, m in r["samples"]))


def full_split(model, tokenizer) -> None:
    prompts = [e.prompt for e in load_split("test")]
    start = time.perf_counter()
    expected = ask_many(model, tokenizer, prompts)
    torch_s = time.perf_counter() - start
    ids = [tokenizer.encode_prompt(model_prompt(task_of(p), p)) for p in prompts]
    backend = make_backend("trn2", model, max_batch=16)
    backend.warm()
    start = time.perf_counter()
    requests = generate(backend, ids, tokenizer.eos_id, max_batch=16)
    trn_s = time.perf_counter() - start
    got = [read_answer(task_of(p), tokenizer.decode_answer(r.output_ids)) for p, r in zip(prompts, requests)]
    same = sum(a == b for a, b in zip(got, expected))
    print(f"4. whole test split on the simulated trn2 (compiled programs, KV cache, continuous batching, batch 16): "
          f"{same}/{len(prompts)} answers identical to PyTorch greedy; {trn_s:.0f} s wall vs {torch_s:.1f} s "
          f"for PyTorch ({trn_s / torch_s:.0f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full-split", action="store_true", help="also check all 2,000 test prompts on trn2")
    parser.add_argument("--requests", type=int, default=32, help="requests per throughput measurement")
    parser.add_argument("--only-full-split", action="store_true", help="run part 4 only")
    parser.add_argument("--parts", default="0123", help="which of parts 0-3 to run, e.g. --parts 3")
    parser.add_argument("--soak", action="store_true", help="run part 5 only: sustained requests, RSS sampled")
    parser.add_argument("--soak-requests", type=int, default=600, help="requests per soak run")
    parser.add_argument("--soak-seconds", type=float, default=900.0, help="a soak run stops after this long")
    parser.add_argument("--soak-one", choices=("cpu", "trn1", "trn2", "trn3"), help=argparse.SUPPRESS)
    parser.add_argument("--soak-no-collect", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.soak:
        soak_report(args.soak_requests, args.soak_seconds)
        return
    model, tokenizer = load_checkpoint()
    if args.only_full_split:
        full_split(model, tokenizer)
        return
    if args.soak_one:
        print(json.dumps(soak(model, tokenizer, args.soak_one, args.soak_requests, args.soak_seconds,
                              collect=not args.soak_no_collect)))
        return
    import tempfile
    if "0" in args.parts:
        with tempfile.TemporaryDirectory() as cache_dir:
            compile_once(model, cache_dir)
    if "1" in args.parts:
        simulated_latency(model, tokenizer)
    if "2" in args.parts:
        print("2. server throughput (wall clock, requests/s)")
    for concurrency in (8, 32) if "2" in args.parts else ():
        cpu = server_throughput(model, tokenizer, concurrency, "cpu", args.requests)
        trn = server_throughput(model, tokenizer, concurrency, "trn2", args.requests)
        print(f"   concurrency {concurrency:2d}: simulated trn2 {trn:6.2f} req/s, PyTorch backend {cpu:6.1f} req/s "
              f"(ratio {cpu / trn:.0f}x)")
    if "3" in args.parts:
        print("3. wall-clock per generated token, one short answer ('407+38')")
        cpu_s, cpu_tok, n, _ = wall_per_token(model, tokenizer, "cpu")
        trn_s, trn_tok, _, replay_tok = wall_per_token(model, tokenizer, "trn2")
        print(f"   simulated trn2: {trn_s * 1e3:.0f} ms for {n} tokens = {trn_tok * 1e3:.0f} ms/token "
              f"({replay_tok * 1e3:.0f} ms of it replaying the compiled programs); PyTorch "
              f"{cpu_tok * 1e3:.1f} ms/token (simulator overhead {trn_tok / cpu_tok:.0f}x); target: answer within 1 s -> "
              f"{'met' if trn_s <= 1.0 else 'NOT met'}")
    if args.full_split:
        full_split(model, tokenizer)


if __name__ == "__main__":
    main()
