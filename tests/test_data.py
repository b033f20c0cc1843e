"""The corpus: deterministic, disjoint splits, right answers, and answer-only batches."""

from __future__ import annotations

import torch

from trnlab.data import (
    CORPUS_DIR, IGNORE_INDEX, SPLITS, TASKS, BatchSampler, CharTokenizer, CorpusConfig, encode_examples,
    example_targets, load_corpus, make_corpus, model_prompt, read_answer, solve, task_of, write_corpus, written_answer,
)

SMALL = CorpusConfig(seed=7, train_per_task=300, val_per_task=20, test_per_task=40)


def test_generation_is_deterministic_byte_for_byte(tmp_path):
    first = write_corpus(tmp_path / "a", SMALL)
    second = write_corpus(tmp_path / "b", SMALL)
    for split in SPLITS:
        assert first[split].read_bytes() == second[split].read_bytes()


def test_committed_corpus_is_what_the_generator_writes(tmp_path):
    regenerated = write_corpus(tmp_path)  # default config, as `python -m trnlab.data`
    for split in SPLITS:
        assert regenerated[split].read_bytes() == (CORPUS_DIR / f"{split}.tsv").read_bytes(), split


def test_different_seeds_give_different_corpora():
    assert make_corpus(SMALL)["test"] != make_corpus(CorpusConfig(seed=8, train_per_task=300, val_per_task=20, test_per_task=40))["test"]


def _canonical(example):
    # 3+5 and 5+3 are one problem: a split must not leak it in the other order either
    if example.task == "add":
        a, b = example.prompt.split("+")
        return ("add", *sorted((int(a), int(b))))
    return (example.task, example.prompt)


def test_committed_splits_share_no_problem_and_have_all_tasks():
    corpus = load_corpus()
    keys = {split: {_canonical(e) for e in corpus[split]} for split in SPLITS}
    assert not keys["train"] & keys["val"]
    assert not keys["train"] & keys["test"]
    assert not keys["val"] & keys["test"]
    for split in SPLITS:
        assert len(keys[split]) == len(corpus[split]), f"repeated problem inside {split}"
        assert {e.task for e in corpus[split]} == set(TASKS)


def test_every_answer_is_right():
    for examples in load_corpus().values():
        for e in examples:
            assert solve(e.task, e.prompt) == e.answer, e
            assert task_of(e.prompt) == e.task


def test_subtraction_never_goes_negative_and_numbers_have_several_lengths():
    corpus = make_corpus(SMALL)
    subs = [e for e in corpus["train"] if e.task == "sub"]
    assert all(not e.answer.startswith("-") for e in subs)
    lengths = {len(e.prompt.split("+")[0]) for e in corpus["train"] if e.task == "add"}
    assert lengths == {1, 2, 3}


def test_targets_are_inputs_shifted_by_one_and_prompt_is_ignored():
    tokenizer = CharTokenizer()
    ids = tokenizer.encode_example("12+5", "17")
    inputs, targets = example_targets(ids, tokenizer.sep_id, answer_only=False)
    assert inputs == ids[:-1] and targets == ids[1:]
    inputs, targets = example_targets(ids, tokenizer.sep_id, answer_only=True)
    counted = [t for t in targets if t != IGNORE_INDEX]
    # only the answer "17" and <eos> are graded, predicted from <sep>, "1", "7"
    assert counted == tokenizer.encode("17") + [tokenizer.eos_id]
    assert inputs[targets.index(counted[0])] == tokenizer.sep_id


def test_encoded_split_pads_inputs_and_ignores_padding_targets():
    tokenizer = CharTokenizer()
    examples = make_corpus(SMALL)["val"]
    x, y = encode_examples(examples, tokenizer)
    assert x.shape == y.shape and x.dtype == torch.long
    longest = max(len(tokenizer.encode_example(model_prompt(e.task, e.prompt), written_answer(e.task, e.answer))) - 1
                  for e in examples)
    assert x.shape == (len(examples), longest)
    assert bool(((x == tokenizer.pad_id) <= (y == IGNORE_INDEX)).all())  # pad input ⇒ ignored target
    # per row: exactly the written answer and <eos> are graded
    graded = (y != IGNORE_INDEX).sum(dim=1).tolist()
    assert graded == [len(written_answer(e.task, e.answer)) + 1 for e in examples]


def test_batch_sampler_is_reproducible_and_trims_padding():
    tokenizer = CharTokenizer()
    x, y = encode_examples(make_corpus(SMALL)["train"], tokenizer)
    a, b = BatchSampler(x, y, 16, seed=3), BatchSampler(x, y, 16, seed=3)
    for _ in range(3):
        (xa, ya), (xb, yb) = next(a), next(b)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert xa.shape[0] == 16 and bool((ya[:, -1] != IGNORE_INDEX).any())


def test_module_entry_point_rewrites_the_same_files(tmp_path):
    from trnlab.data.__main__ import main

    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "test.tsv").read_bytes() == (CORPUS_DIR / "test.tsv").read_bytes()


def test_number_template_pads_operands_and_writes_answers_units_first():
    assert model_prompt("add", "407+38") == "407+038" and model_prompt("sub", "9-0") == "009-000"
    assert model_prompt("reverse", "reverse kite") == "reverse kite"
    assert model_prompt("add", "12+") == "12+"  # not a number problem after all: read as typed
    assert written_answer("add", "445") == "5440" and read_answer("add", "5440") == "445"
    assert written_answer("sub", "0") == "000" and read_answer("sub", "000") == "0"
    assert written_answer("reverse", "etik") == "etik" and written_answer("sort", "123") == "123"
    assert read_answer("add", "5x") == "x5"  # a malformed answer is shown, not hidden
    assert read_answer(None, "abc") == "abc"
    assert task_of("hello") is None


def test_every_answer_survives_the_template():
    for e in load_corpus()["test"]:
        assert read_answer(e.task, written_answer(e.task, e.answer)) == e.answer


def test_batches_hold_the_template():
    from trnlab.data import Example

    tokenizer = CharTokenizer()
    x, y = encode_examples([Example("add", "407+38", "445")], tokenizer)
    assert tokenizer.decode(x[0].tolist()) == "<bos>407+038<sep>5440"
    graded = [int(t) for t in y[0] if t != IGNORE_INDEX]
    assert tokenizer.decode(graded) == "5440<eos>"


def test_problem_key_merges_commuted_sums_only():
    from trnlab.data import problem_key

    assert problem_key("3+5") == problem_key("5+3") == problem_key("03+5")
    assert problem_key("40-4") != problem_key("4-40")
    assert problem_key("reverse ab") != problem_key("reverse ba")
