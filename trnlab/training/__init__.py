"""trnlab.training — training the tiny GPT on the simulated Trainium (notebook 07).

    from trnlab.training import compile_train_step, AdamWConfig
    step = compile_train_step(model, (idx, targets), target="trn2", autocast="none",
                              optimizer=AdamWConfig(lr=3e-3, weight_decay=0.1))
    result = step(idx, targets)              # result.loss, result.profile (simulated time, MFU, phases)

Modules: `capture` (AOT Autograd's joint forward + backward graph), `lower` (the training lowering:
transposes folded into matmuls, bias fused, one kernel call per op), `step` (one traced program of
forward, backward and AdamW, replayed per step), `run` (the same batches through PyTorch and the
device), `checkpoint` (safetensors + JSON, resume), `report` (time, MFU, FLOPs, cost to train), `overlap`
(AdamW's updates placed inside the backward, replayed).
"""
from trnlab.training import aot  # noqa: F401  (lends torch.compile(backend="trnlab") its gradient path)
from trnlab.training.checkpoint import load_train_state, save_train_state
from trnlab.training.step import AdamWConfig, StepProfile, StepResult, TrainStep, compile_train_step

__all__ = ["compile_train_step", "AdamWConfig", "TrainStep", "StepResult", "StepProfile", "save_train_state",
           "load_train_state"]
