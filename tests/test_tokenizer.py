"""The character tokenizer: round trips, special tokens, and a clear error for unknown characters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlab.data import SPECIAL_TOKENS, CharTokenizer, UnknownCharacterError
from trnlab.data.tokenizer import CHARACTERS

tokenizer = CharTokenizer()


@settings(deadline=None)  # no timing in tests: a busy machine must not fail them
@given(st.text(alphabet=CHARACTERS, max_size=40))
def test_encode_decode_round_trip(text):
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text


@settings(deadline=None)
@given(st.text(alphabet=CHARACTERS, max_size=20), st.text(alphabet=CHARACTERS, max_size=10))
def test_example_layout_and_answer_recovery(prompt, answer):
    ids = tokenizer.encode_example(prompt, answer)
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    assert ids[len(prompt) + 1] == tokenizer.sep_id
    assert tokenizer.decode_answer(ids) == answer
    assert ids[: len(prompt) + 2] == tokenizer.encode_prompt(prompt)


def test_vocabulary_is_special_tokens_then_characters():
    assert tokenizer.vocab[: len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
    assert tokenizer.vocab_size == len(SPECIAL_TOKENS) + len(CHARACTERS)
    assert len(set(tokenizer.vocab)) == tokenizer.vocab_size
    assert tokenizer.decode([tokenizer.bos_id, tokenizer.sep_id]) == "<bos><sep>"


@pytest.mark.parametrize("text, bad, position", [("12*3", "*", 2), ("Reverse", "R", 0), ("sort 12\n", "\n", 7)])
def test_unknown_character_error_names_character_and_position(text, bad, position):
    with pytest.raises(UnknownCharacterError) as info:
        tokenizer.encode(text)
    message = str(info.value)
    assert repr(bad) in message and f"position {position}" in message


def test_special_token_names_are_not_characters():
    with pytest.raises(UnknownCharacterError):
        tokenizer.encode("<eos>")  # "<" is not a character: names are not smuggled in as text


def test_decode_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([tokenizer.vocab_size])


def test_json_round_trip():
    assert CharTokenizer.from_json(tokenizer.to_json()) == tokenizer
