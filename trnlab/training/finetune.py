"""Train on the simulated Trainium and keep the result: a checkpoint with its provenance.

The checkpoint of notebook 02 was trained by PyTorch on the CPU (4000 steps of 64 sequences). This module
continues its training on the simulated chip — a *stated fine-tune*, not training from scratch (that
would take hours of simulation) — with the compiled training step of notebook 07 (forward, backward and
AdamW as one program, replayed each step), and writes what serving loads:

    data/checkpoint_trn2/model.safetensors   the weights (safetensors, no pickle)
    data/checkpoint_trn2/config.json         model and tokenizer (as every checkpoint)
    data/checkpoint_trn2/train_log.json      the provenance: device, start checkpoint (its SHA-256), steps,
                                             batch, seed, learning rate, the losses, simulated time and
                                             cost, the test-split accuracy, the command that reproduces it

    python -m trnlab train-sim --out data/checkpoint_trn2          # the committed recipe
    python -m trnlab train-sim --steps 4 --out /tmp/ckpt           # a quick run
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from trnlab.model.checkpoint import DEFAULT_CHECKPOINT, SIMULATED_CHECKPOINT, load_checkpoint, save_checkpoint  # noqa: F401


@dataclass(frozen=True)
class FinetuneConfig:
    steps: int = 24                 # optimizer steps on the simulated chip
    batch_size: int = 16            # sequences per step (one compiled micro-batch)
    learning_rate: float = 3e-4     # the CPU recipe's schedule ends at 1e-4: a gentle continuation
    weight_decay: float = 0.1
    seed: int = 1                   # the batches' order (the CPU run used seed 0)
    target: str = "trn2"


def _shown(path: Path) -> str:
    """A path as a command shows it: relative to the repository when inside it (data/checkpoint)."""
    path, root = Path(path).resolve(), DEFAULT_CHECKPOINT.resolve().parent.parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def finetune(config: FinetuneConfig, out_dir: Path, start: Path = DEFAULT_CHECKPOINT,
             on_step: Callable[[int, float], None] | None = None, evaluate_test: bool = True) -> dict:
    """Fine-tune the checkpoint at `start` on the simulated `config.target` and save it in `out_dir`;
    returns the provenance written to its train_log.json."""
    from trnlab.data.corpus import load_split
    from trnlab.economics.figures import default_systems
    from trnlab.hardware.device import chip_spec
    from trnlab.model.generate import accuracy_by_task
    from trnlab.training.report import GENERATIONS
    from trnlab.training.run import run_compiled, train_batches
    from trnlab.training.step import AdamWConfig, compile_train_step

    model, tokenizer = load_checkpoint(start)
    batches = train_batches(config.steps, batch_size=config.batch_size, seed=config.seed)
    optimizer = AdamWConfig(lr=config.learning_rate, betas=(0.9, 0.95), eps=1e-8, weight_decay=config.weight_decay)
    t0 = time.perf_counter()
    step = compile_train_step(model, batches[0], target=config.target, optimizer=optimizer)
    log = run_compiled(step, batches, on_step=on_step)
    wall = time.perf_counter() - t0
    step.load_into(model)
    model.eval()
    simulated_s = sum(p.total_ns for p in log.profiles) * 1e-9
    system = default_systems()[GENERATIONS[config.target]]
    usd_per_core_hour = system.usd_per_chip_hour / chip_spec(config.target).cores
    provenance = {
        "trained_on": f"simulated {config.target} (trnlab), one NeuronCore, compiled training step replayed",
        "kind": "fine-tune",
        "started_from": {"checkpoint": _shown(start), "model_sha256": _sha256(Path(start) / "model.safetensors")},
        "finetune_config": asdict(config),
        "losses": [float(x) for x in log.losses],
        "simulated_seconds": simulated_s,
        "simulated_step_us": log.profiles[-1].total_us,
        "usd": simulated_s / 3600 * usd_per_core_hour,
        "usd_per_core_hour": usd_per_core_hour,
        "price": f"{system.name}: {system.price.status}",
        "wall_seconds": round(wall, 1),
        "command": "python -m trnlab train-sim " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in asdict(config).items()) + f" --out {_shown(out_dir)}",
        "params": model.num_params(),
        # what notebook 00's cells read from a train log
        "train_config": {"steps": config.steps, "batch_size": config.batch_size},
    }
    if evaluate_test:
        provenance["test_accuracy"] = accuracy_by_task(model, tokenizer, load_split("test"))
    save_checkpoint(model, tokenizer, Path(out_dir), provenance)
    return provenance
