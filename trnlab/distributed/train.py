"""A real data-parallel training run across processes, gradients through torch.distributed (gloo).

    torchrun --nproc-per-node=2 -m trnlab.distributed.train --steps 20 --global-batch 32 --seed 0 --out runs/dp2
    python -m trnlab.distributed.train --steps 20 --global-batch 32 --seed 0 --out runs/dp1   # 1 process

Each process stands for one device. Every rank builds the same model (seeded; rank 0's weights are
then broadcast, as DistributedDataParallel does), draws the same global batch (same seed) and keeps
its B/W rows; the answer-token count of the global batch is all-reduced, each rank runs the
`TrainStep` of `data_parallel` on its rows, and the flat gradient is all-reduced (sum) before
clipping and AdamW — so every rank applies the global batch's update and the losses equal the
1-process run's (to float rounding: the sums are taken in another order). Rank 0 writes every
step's loss to ``OUT/losses.json``.

Failures never hang the job: the process group has a time-out (``--timeout``, seconds), a rank
whose collective fails says which step and which collective and exits with code 3, and torchrun
then stops the other ranks and reports the failed one. ``--fail-rank R --fail-at-step K`` makes
rank R die (or, with ``--fail-mode hang``, stop answering) at step K, to test exactly that.
Everything listens on 127.0.0.1 only.

Workers never outlive their launcher: each rank asks Linux to send it SIGKILL when its parent (the
torchrun agent) dies (``prctl(PR_SET_PDEATHSIG)``), and elsewhere a thread watches the parent's pid.
Every argument is checked before any work starts (`check_args`): a bad value, a global batch that
does not split over the ranks, an ``--out`` that cannot be written are one-line errors (exit code 2).
"""

from __future__ import annotations

import os

_PARENT_AT_START = os.getppid()   # read before the slow imports: the launcher may die while they run

import argparse  # noqa: E402
import ctypes
import datetime
import gc
import json
import math
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import torch
import torch.distributed as dist

from trnlab.data.batches import BatchSampler, encode_examples
from trnlab.data.corpus import CORPUS_DIR, load_split
from trnlab.data.tokenizer import CharTokenizer
from trnlab.distributed import data_parallel as dp
from trnlab.model.gpt import GPT, GPTConfig
from trnlab.model.train import TrainConfig, learning_rate_at

RANK_LOST_EXIT = 3     # a collective failed: another rank died or stopped answering
SIMULATED_DEATH_EXIT = 17


class RankLost(RuntimeError):
    """A collective did not complete: the message names the step, the collective and the time-out."""


class GroupOutlived(RuntimeError):
    """The process group survived destroy_process_group: something still holds a reference to it."""


class Group:
    """The ranks of this job: torch.distributed when launched by torchrun, a group of one otherwise."""

    def __init__(self, timeout_s: float, distributed: bool | None = None):
        """`distributed`: use torch.distributed even for one process (default: when WORLD_SIZE > 1)."""
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.timeout_s = timeout_s
        self.distributed = self.world > 1 if distributed is None else distributed
        if self.distributed:
            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            if addr not in ("127.0.0.1", "localhost"):
                raise SystemExit(f"this course runs on one machine: MASTER_ADDR must be 127.0.0.1, got {addr}")
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            # torch.distributed.nn.functional binds `group.WORLD` as a default argument when it is
            # imported; the optimizer imports it lazily (via torch._dynamo), after this group exists,
            # and those defaults would keep the group alive past destroy_process_group (see `close`)
            import torch.distributed.nn.functional  # noqa: F401
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))

    def all_reduce(self, tensor: torch.Tensor, what: str, step: int) -> torch.Tensor:
        """Sum over ranks, in place; a failure becomes a `RankLost` that says what and when."""
        if self.distributed:
            try:
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            except Exception as error:  # gloo raises RuntimeError / DistBackendError subclasses
                raise RankLost(f"rank {self.rank}: all-reduce of {what} at step {step} failed — another rank "
                               f"died or did not answer within the {self.timeout_s:g} s time-out "
                               f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})") from error
        return tensor

    def broadcast(self, tensor: torch.Tensor, what: str) -> torch.Tensor:
        if self.distributed:
            try:
                dist.broadcast(tensor, src=0)
            except Exception as error:
                raise RankLost(f"rank {self.rank}: broadcast of {what} failed ({error})") from error
        return tensor

    def close(self, check: bool = True) -> None:
        """Destroy the process group, and check that it is gone — its gloo threads joined — before Python exits.

        A gloo worker thread drops its reference to a finished collective (and to the tensors it
        summed) a moment after the caller has the result; dropping a tensor that Python made takes the
        GIL. If the group outlives this call, that can happen during interpreter shutdown, where
        taking the GIL ends the thread inside C++ code that may not unwind: the rank aborts (SIGABRT,
        "terminate called without an active exception") after its work is done. Destroying the group
        here joins those threads while Python is still alive. `check`: raise `GroupOutlived` if it is not.
        """
        if self.distributed and dist.is_initialized():
            world = weakref.ref(dist.group.WORLD)
            dist.destroy_process_group()
            gc.collect()
            if check and world() is not None:
                raise GroupOutlived(f"rank {self.rank}: the process group is still referenced after "
                                    "destroy_process_group; its gloo threads would end during interpreter "
                                    "shutdown and abort the process (SIGABRT)")


def die_with_parent() -> None:
    """End this process when the process that started it ends (a killed torchrun must not leave orphans)."""
    parent = _PARENT_AT_START
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):                 # not Linux: watch the parent instead
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(RANK_LOST_EXIT)
        threading.Thread(target=watch, name="trnlab-parent-watch", daemon=True).start()
    if os.getppid() != parent:                        # the parent died before the request was made
        os._exit(RANK_LOST_EXIT)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trnlab.distributed.train", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--global-batch", type=int, required=True, help="rows per step over all ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="folder for losses.json")
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait for a peer")
    parser.add_argument("--fail-rank", type=int, default=None, help="(testing) this rank fails ...")
    parser.add_argument("--fail-at-step", type=int, default=None, help="(testing) ... at this step")
    parser.add_argument("--fail-mode", choices=("die", "hang"), default="die")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR)
    parser.add_argument("--train-examples", type=int, default=None,
                        help="use only the first N training examples (a quicker start; default all)")
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace, world: int = 1) -> None:
    """Every argument sane before any work starts; a ValueError names the option, the value and the rule."""
    at_least_one = {"--steps": args.steps, "--global-batch": args.global_batch, "--n-layer": args.n_layer,
                    "--n-head": args.n_head, "--n-embd": args.n_embd}
    for option, value in at_least_one.items():
        if value < 1:
            raise ValueError(f"{option} {value}: must be at least 1")
    if args.global_batch % world:
        raise ValueError(f"--global-batch {args.global_batch} does not split evenly over {world} processes")
    if args.n_embd % args.n_head:
        raise ValueError(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    for option, value in {"--learning-rate": args.learning_rate, "--timeout": args.timeout}.items():
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{option} {value}: must be a number > 0")
    if args.warmup_steps < 0 or args.seed < 0:
        raise ValueError(f"--warmup-steps {args.warmup_steps} and --seed {args.seed} must be >= 0")
    if args.train_examples is not None and args.train_examples < 1:
        raise ValueError(f"--train-examples {args.train_examples}: must be at least 1")
    if not args.corpus.is_dir():
        raise ValueError(f"--corpus {args.corpus}: no such folder")
    try:                                        # --out must take losses.json: find out now, not after training
        args.out.mkdir(parents=True, exist_ok=True)
        probe = args.out / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"--out {args.out} cannot be written: {error.strerror or error}") from None


def run(args: argparse.Namespace) -> dict:
    """The job in this process (rank and world from torchrun's environment, else a group of one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the losses must not depend on the machine's core count
    group = Group(args.timeout)
    try:
        result = _run(args, group)
    except BaseException:
        group.close(check=False)  # the error's frames may still hold the group; it goes with them
        raise
    finally:
        torch.set_num_threads(threads)
    group.close()
    return result


def _run(args: argparse.Namespace, group: Group) -> dict:
    started = time.perf_counter()
    tokenizer = CharTokenizer()
    examples = load_split("train", args.corpus)[:args.train_examples]
    train_x, train_y = encode_examples(examples, tokenizer)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd)
    schedule = TrainConfig(steps=args.steps, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps)
    torch.manual_seed(args.seed)
    model = GPT(config)
    flat = group.broadcast(dp.flat_params(model).clone(), "the initial weights")
    dp.set_flat_params(model, flat)
    model.train()
    optimizer = model.configure_optimizer(schedule.learning_rate, schedule.weight_decay)
    batches = BatchSampler(train_x, train_y, args.global_batch, seed=args.seed)
    losses = []
    for step in range(args.steps):
        if step == args.fail_at_step and group.rank == args.fail_rank:
            print(f"rank {group.rank}: failing on purpose at step {step} (--fail-mode {args.fail_mode})",
                  file=sys.stderr, flush=True)
            if args.fail_mode == "die":
                os._exit(SIMULATED_DEATH_EXIT)
            time.sleep(10 * args.timeout + 60)  # "hang": never answer; the others' time-out must fire
        lr = learning_rate_at(step, schedule)
        for g in optimizer.param_groups:
            g["lr"] = lr
        x, y = next(batches)  # the global batch, the same on every rank
        xs, ys = dp.shard_rows(x, y, group.rank, group.world)
        tokens = int(group.all_reduce(torch.tensor([dp.counted_tokens(ys)], dtype=torch.int64), "the token count", step))
        optimizer.zero_grad(set_to_none=True)
        loss_sum = dp.torch_step(model, xs, ys, tokens)
        grads = group.all_reduce(torch.from_numpy(dp.flat_grads(model)), "the gradients", step)
        dp.set_flat_grads(model, grads)
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
        optimizer.step()
        total = group.all_reduce(torch.tensor([loss_sum], dtype=torch.float64), "the loss", step)
        losses.append(float(total) / tokens)
    result = {"world_size": group.world, "steps": args.steps, "global_batch": args.global_batch, "seed": args.seed,
              "model": config.to_json(), "losses": losses, "seconds": round(time.perf_counter() - started, 2)}
    if group.rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "losses.json").write_text(json.dumps(result, indent=1))
    return result


def launch(nproc: int, args: list[str], timeout_s: float = 300.0) -> subprocess.Popen:
    """Start the job as a user would from a shell — torchrun with `nproc` processes on 127.0.0.1, or
    plain python for one — and return the running process (stdout and stderr piped)."""
    if nproc > 1:
        with socket.socket() as s:  # a free port on the loopback interface
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "trnlab.distributed.train", *args]
    else:
        command = [sys.executable, "-m", "trnlab.distributed.train", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def main(argv: list[str] | None = None) -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        die_with_parent()
    args = parse_args(argv)
    try:
        check_args(args, world)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    try:
        result = run(args)
    except RankLost as lost:
        print(f"error: {lost}", file=sys.stderr, flush=True)
        return RANK_LOST_EXIT
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{result['world_size']} process(es), {result['steps']} steps, global batch {result['global_batch']}: "
              f"final loss {result['losses'][-1]:.4f}; wrote {args.out / 'losses.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
