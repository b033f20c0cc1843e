"""Stage 1 of the chain: the training data.

A deterministic synthetic "assistant" corpus (`tasks`, written to ``data/corpus/`` by `corpus`),
a character tokenizer with special tokens (`tokenizer`) and next-token batches (`batches`).
Regenerate the files with ``python -m trnlab.data``.
"""

from trnlab.data.batches import IGNORE_INDEX, BatchSampler, encode_examples, example_targets
from trnlab.data.corpus import CORPUS_DIR, load_corpus, load_split, write_corpus
from trnlab.data.tasks import (
    SPLITS, TASKS, CorpusConfig, Example, make_corpus, model_prompt, problem_key, read_answer, solve, task_of, written_answer,
)
from trnlab.data.tokenizer import SPECIAL_TOKENS, CharTokenizer, UnknownCharacterError

__all__ = [
    "BatchSampler", "CORPUS_DIR", "CharTokenizer", "CorpusConfig", "Example", "IGNORE_INDEX",
    "SPECIAL_TOKENS", "SPLITS", "TASKS", "UnknownCharacterError", "encode_examples", "example_targets",
    "load_corpus", "load_split", "make_corpus", "model_prompt", "problem_key", "read_answer", "solve", "task_of", "written_answer",
    "write_corpus",
]
