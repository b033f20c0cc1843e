"""Stage 2 of the chain: the tiny GPT in PyTorch.

`gpt` (the model, its config and `layer_costs`), `train` (reference training on the CPU),
`generate` (greedy/sampled answers, exact-match accuracy), `checkpoint` (safetensors + JSON) and
`cli` (``python -m trnlab train`` / ``ask``). The trained checkpoint lives in ``data/checkpoint``.
"""

from trnlab.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint, load_train_log, save_checkpoint
from trnlab.model.generate import (
    PromptTooLongError, accuracy_by_task, ask, ask_many, exact_match, generate_ids, generation_steps,
)
from trnlab.model.gpt import GPT, GPTConfig, LayerCost, is_matmul, layer_costs
from trnlab.model.train import TrainConfig, TrainResult, learning_rate_at, train

__all__ = [
    "DEFAULT_CHECKPOINT", "GPT", "GPTConfig", "LayerCost", "PromptTooLongError", "TrainConfig", "TrainResult",
    "accuracy_by_task", "ask", "ask_many", "exact_match", "generate_ids", "generation_steps", "is_matmul", "layer_costs",
    "learning_rate_at", "load_checkpoint", "load_train_log", "save_checkpoint", "train",
]
