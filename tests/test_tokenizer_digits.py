"""A BPE that splits digits one by one runs on tiktoken with exactly the ids `tokenizers` gives.

HF runs two splits (Digits, then GPT-2's ByteLevel regex); tiktoken takes one regex
(`DIGITS_PATTERN`). The two must agree on any text, the places where they could part included:
whitespace just before a digit, a space before a number, contractions and punctuation next to
digits, and Unicode numbers that are not ASCII digits (superscripts, fractions, Roman numerals,
Arabic-Indic and Devanagari digits).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_tokenizer import VARIED, stdlib_sample
from tinylm.tokenizer import Tokenizer, train_bpe
from tinylm.tokenizer.tiktoken_bridge import DIGITS_PATTERN, GPT2_PATTERN, split_pattern

NUMBERS = ["0", "7", "42", "870", "2019", " 123456", "3.14159", "1e-9", "0xFF", "²", "½", "Ⅻ", "٣٤", "०९",
           " ", "  ", "\t", "\n", "\r\n", " " * 5, "'s", "'ll", "x", "ab", " the", "(", ")", "*", "-", "é", "東"]
number_text = st.lists(st.sampled_from(NUMBERS), max_size=30).map("".join)
unicode_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120)


@pytest.fixture(scope="module")
def digits() -> Tokenizer:
    return train_bpe(stdlib_sample(300_000) + VARIED, vocab_size=1024, split_digits=True)


@pytest.fixture(scope="module")
def hf(digits: Tokenizer):
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_str(digits.to_json())


def test_it_runs_on_tiktoken_and_no_token_holds_two_digits(digits: Tokenizer) -> None:
    assert digits.backend == "tiktoken" and digits.fallback_reason is None
    spec = json.loads(digits.to_json())
    assert split_pattern(spec["pre_tokenizer"]) == DIGITS_PATTERN
    assert all(sum(ch.isnumeric() for ch in digits.decode([i])) <= 1 for i in range(len(spec["added_tokens"]),
                                                                                       digits.n_vocab))
    # the same number, wherever it stands, is the same tokens
    for text in (" 870", "x870", "(870)", "870\n", "a  870"):
        pieces = [digits.decode([i]) for i in digits.encode(text)]
        assert [piece for piece in pieces if any(ch.isdigit() for ch in piece)] == ["8", "7", "0"], text


@pytest.mark.parametrize("text", VARIED + NUMBERS)
def test_ids_equal_tokenizers_ids(digits: Tokenizer, hf, text: str) -> None:
    assert digits.encode(text) == hf.encode(text, add_special_tokens=False).ids
    assert digits.decode(digits.encode(text)) == text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(number_text, unicode_text, st.tuples(number_text, unicode_text, number_text).map("".join)))
def test_ids_equal_tokenizers_ids_on_any_text(digits: Tokenizer, hf, text: str) -> None:
    ids = digits.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False).ids
    assert digits.decode(ids) == text


def test_only_the_two_known_splits_take_the_fast_path() -> None:
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    assert split_pattern(byte_level) == GPT2_PATTERN
    grouped = {"type": "Digits", "individual_digits": False}
    single = {"type": "Digits", "individual_digits": True}
    assert split_pattern({"type": "Sequence", "pretokenizers": [single, byte_level]}) == DIGITS_PATTERN
    for other in ([grouped, byte_level], [byte_level, single], [single], [single, {**byte_level, "use_regex": False}],
                  [single, byte_level, single]):
        assert split_pattern({"type": "Sequence", "pretokenizers": other}) is None, other
    assert split_pattern(None) is None
