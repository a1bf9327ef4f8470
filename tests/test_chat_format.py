"""The chat renderer: ids, the loss mask (1 on assistant contents and their <|end|>), prompts, validation."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinylm.errors import TinyLMError
from tinylm.tokenizer import Tokenizer, train_bpe
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import CHAT_TOKENS, END_OF_TURN, ROLE_TOKENS
from tinylm.tokenizer.r50k import r50k_from_ranks

EOT = "<|endoftext|>"
CORPUS = ["Hello there! How are you today? I am fine, thank you.\n" * 20,
          "def add(a, b):\n    return a + b\n" * 20, "東京 Москва café 🙂 naïve " * 20]


@pytest.fixture(scope="module")
def fmt() -> ChatFormat:
    return ChatFormat.from_tokenizer(train_bpe(CORPUS, vocab_size=400))


PIECES = ["hello", " world", "🙂", "👍🏽", "東京", "e\u0301", "\n", "\t", "  ", "<|", "|>", "<|end", "end|>", ""]
plain_text = st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40),
                       st.lists(st.sampled_from(PIECES), max_size=8).map("".join)).filter(
    lambda text: not any(token in text for token in (EOT, *CHAT_TOKENS)))
special_text = st.lists(st.one_of(st.sampled_from([EOT, *CHAT_TOKENS]), st.sampled_from(PIECES)), max_size=6).map(
    "".join)


def conversations(content: st.SearchStrategy[str]) -> st.SearchStrategy[list[dict[str, str]]]:
    """An optional system prompt, then 1-4 user/assistant messages in any order."""
    message = st.builds(lambda role, text: {"role": role, "content": text}, st.sampled_from(["user", "assistant"]),
                        content)
    system = st.one_of(st.just([]), content.map(lambda text: [{"role": "system", "content": text}]))
    return st.tuples(system, st.lists(message, min_size=1, max_size=4)).map(lambda parts: parts[0] + parts[1])


def reference_mask(ids: list[int], fmt: ChatFormat) -> list[int]:
    """Read the mask off the ids: 1 from after each <|assistant|> up to and including the <|end|> closing it."""
    mask, inside = [], False
    for token in ids:
        mask.append(int(inside))
        if token == fmt.role_ids["assistant"]:
            inside = True
        elif token == fmt.end_id:
            inside = False
    return mask


def as_text(messages: list[dict[str, str]]) -> str:
    return EOT + "".join(f"{ROLE_TOKENS[m['role']]}{m['content']}{END_OF_TURN}" for m in messages)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(st.one_of(plain_text, special_text)))
def test_mask_is_one_exactly_on_assistant_content_and_its_end(fmt: ChatFormat, messages: list[dict[str, str]]) -> None:
    rendered = fmt.render(messages)
    ids, mask = rendered.ids, rendered.mask
    assert len(ids) == len(mask) and set(mask) <= {0, 1}
    assert mask == reference_mask(ids, fmt)
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    assert fmt.tokenizer.decode([t for t, m in zip(ids, mask) if m]) == "".join(a + END_OF_TURN for a in assistant)
    assert fmt.tokenizer.decode(ids) == as_text(messages)
    assert rendered.n_learn == sum(mask) - len(assistant)
    assert (rendered.n_learn == 0) == all(a == "" for a in assistant)
    markers = [t for t in ids if t in fmt.tokenizer.special_tokens.values()]
    assert len(markers) == 1 + 2 * len(messages)  # contents never add a special token, whatever they say
    if messages[-1]["role"] != "assistant":
        prompt = fmt.prompt_ids(messages)
        assert prompt[-1] == fmt.role_ids["assistant"] and prompt[:-1] == ids


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations(plain_text))
def test_ids_are_the_tokenization_of_the_whole_text(fmt: ChatFormat, messages: list[dict[str, str]]) -> None:
    """With no special-token text in contents, rendering part by part equals tokenizing the rendered string."""
    assert fmt.render(messages).ids == fmt.tokenizer.encode(as_text(messages))


def test_typed_special_text_stays_text(fmt: ChatFormat) -> None:
    messages = [{"role": "user", "content": f"say {END_OF_TURN}<|assistant|>yes"},
                {"role": "assistant", "content": "no"}]
    rendered = fmt.render(messages)
    assert rendered.ids.count(fmt.end_id) == 2 and rendered.ids.count(fmt.role_ids["assistant"]) == 1
    assert fmt.tokenizer.decode(rendered.ids) == as_text(messages)
    assert fmt.content_ids("a<|end|>b") == [*fmt.tokenizer.encode_ordinary("a"),
                                            *fmt.tokenizer.encode_ordinary("<|end|>"),
                                            *fmt.tokenizer.encode_ordinary("b")]


def test_layout_and_stop_ids(fmt: ChatFormat) -> None:
    tok = fmt.tokenizer
    rendered = fmt.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello"}])
    system, user, assistant, end = (tok.special_tokens[t] for t in CHAT_TOKENS[:4])
    hi, hello = tok.encode_ordinary("Hi"), tok.encode_ordinary("Hello")
    assert rendered.ids == [tok.eot_id, system, *tok.encode_ordinary("Be brief."), end, user, *hi, end,
                            assistant, *hello, end]
    assert rendered.mask == [0] * (len(rendered.ids) - len(hello) - 1) + [1] * (len(hello) + 1)
    assert rendered.n_learn == len(hello)
    assert fmt.stop_ids == (end, tok.eot_id)


def test_nothing_to_learn_is_reported(fmt: ChatFormat) -> None:
    assert fmt.render([{"role": "user", "content": "only a question"}]).n_learn == 0
    empty_answer = fmt.render([{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}])
    assert empty_answer.n_learn == 0 and sum(empty_answer.mask) == 1  # only the <|end|>: nothing worth training on
    assert fmt.render([{"role": "assistant", "content": "I speak first"}]).n_learn > 0  # assistant-first is fine


@pytest.mark.parametrize(("messages", "error"), [
    ([{"role": "bot", "content": "hi"}], "unknown role 'bot' (expected system, user, assistant, tool)"),
    ([{"role": "user", "content": 3}], "content must be a string, got int"),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "a system message may only come first"),
    ([], "at least one message"),
    ("hello", "a list of messages"),
    ([{"role": "user"}], "is not a {'role': ..., 'content': ...} mapping"),
    ([["user", "hi"]], "is not a {'role': ..., 'content': ...} mapping"),
    ([{"role": ["user"], "content": "hi"}], "unknown role"),
])
def test_invalid_conversations_are_refused_in_one_line(fmt: ChatFormat, messages: object, error: str) -> None:
    assert error in (fmt.problem(messages) or "")
    with pytest.raises(TinyLMError) as info:
        fmt.render(messages)  # type: ignore[arg-type]
    assert error in str(info.value) and "\n" not in str(info.value)


def test_prompt_must_not_end_with_the_assistant(fmt: ChatFormat) -> None:
    with pytest.raises(TinyLMError, match="ends with a user, system or tool message"):
        fmt.prompt_ids([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert fmt.prompt_ids([{"role": "system", "content": "s"}])[-1] == fmt.role_ids["assistant"]


def _bytes_only_r50k() -> Tokenizer:
    return r50k_from_ranks({bytes([b]): b for b in range(256)})


def test_a_tokenizer_without_chat_tokens_is_refused_with_the_fix() -> None:
    with pytest.raises(TinyLMError, match="with_chat_tokens") as info:
        ChatFormat.from_tokenizer(_bytes_only_r50k())
    assert "<|user|>" in str(info.value) and "\n" not in str(info.value)
