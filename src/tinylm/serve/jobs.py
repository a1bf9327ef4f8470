"""From a validated request to scheduler jobs: the checks only the model can make, then one job per choice.

A completion may carry several prompts (text or token ids) and each may be sampled `n` times; OpenAI
numbers prompt p's j-th sample as choice p * n + j, and choice j of a seeded request uses seed + j,
so the samples differ from each other and repeat exactly with the same seed. With seed = S * 1_000_003
(mod 2**63) those are the seeds `tinylm rl` gives the G rows of a prompt seeded S (`row_seeds`).

What ends a choice: the model's own stop tokens (unless `ignore_eos`) and any of `stop_token_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinylm.errors import TinyLMError
from tinylm.inference.sampling import SamplingParams
from tinylm.serve.generation import Generation
from tinylm.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    Sampling,
    declarations_problem,
    name_problem,
)
from tinylm.serve.scheduler import Job
from tinylm.serve.served_model import ServedModel
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import CALL
from tinylm.tokenizer.tool_calls import tool_name

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to the room left


def check_model(served: ServedModel, name: str) -> None:
    if name != served.name:
        raise APIError(404, f"the model {name!r} does not exist; this server serves {served.name!r}", "model",
                       "model_not_found")


def completion_jobs(served: ServedModel, body: CompletionRequest) -> tuple[list[Job], list[list[int]]]:
    """The jobs of a completion request and each choice's prompt ids."""
    check_model(served, body.model)
    prompts = [ids for ids in prompt_ids(served, body.prompt) for _ in range(body.n)]
    max_tokens = DEFAULT_COMPLETION_TOKENS if body.max_tokens is None else body.max_tokens
    if max_tokens > 0:
        check_room(served, prompts)
    stops = stop_ids(served, body, served.completion_stop_ids)
    jobs = [_job(body, ids, max_tokens, index % body.n, stops, body.logprobs,
                 prompt_logprobs=body.echo and body.logprobs is not None) for index, ids in enumerate(prompts)]
    return jobs, prompts


@dataclass
class ChatPrompt:
    """A chat request's prompt: its ids, the tools it declares, and the opening of a call it forces.

    `forced` is None when the model may answer as it likes; with tool_choice "required" the prompt ends
    with <|call|> (forced = ""), with a named function with <|call|>NAME\n (forced = "NAME\n"): the
    model can then only write a call, and the reply reads the forced text as the start of its first one.
    """

    ids: list[int]
    tools: list[dict[str, Any]]
    forced: str | None = None

    @property
    def names(self) -> frozenset[str]:
        """The tools the model may call: a call to any other is text (no client could run it)."""
        return frozenset(name for name in map(tool_name, self.tools) if name is not None)


def chat_jobs(served: ServedModel, body: ChatCompletionRequest) -> tuple[list[Job], ChatPrompt]:
    """The `n` jobs of a chat request and its prompt."""
    check_model(served, body.model)
    chat = served.chat_format
    if chat is None:
        raise APIError(400, f"this model cannot chat: {served.chat_problem}", "messages")
    if not body.messages:
        raise APIError(400, "messages must hold at least one message", "messages")
    messages = [m.as_dict(number) for number, m in enumerate(body.messages, 1)]
    tools = list(body.tools or [])
    if problem := declarations_problem(tools):
        raise APIError(400, problem, "tools")
    try:
        ids = _prompt_ids(chat, messages, tools)
    except TinyLMError as exc:
        raise APIError(400, str(exc), "messages") from None
    prompt = _tool_choice(served, body, ChatPrompt(ids, tools))
    check_length(served, prompt.ids, "messages")
    limit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    stops = stop_ids(served, body, frozenset(chat.stop_ids))
    if chat.agent_ids is not None and (body.tool_choice == "none" or not tools):
        stops |= {chat.agent_ids[CALL]}  # no tool to call (with "none" they stay declared: the history may use them)
    return [_job(body, prompt.ids, served.window if limit is None else limit, j, stops, logprobs)
            for j in range(body.n)], prompt


def _prompt_ids(chat: ChatFormat, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    """The ids to generate from, `tools` declared; earlier calls may name tools the request no longer declares.

    OpenAI lets a client drop `tools` once its calls are done, so such calls are checked as if their tools
    were declared and render as history, while the model hears only of `tools`: it cannot call them again.
    """
    declared = {tool_name(tool) for tool in tools}
    called: dict[str, None] = {}
    for number, message in enumerate(messages, 1):
        for call in message.get("tool_calls") or ():
            if problem := name_problem(call["function"]["name"]):
                raise APIError(400, f"message {number}: the call's {problem}", "messages")
            called[call["function"]["name"]] = None
    history_only = [{"type": "function", "function": {"name": name}} for name in called if name not in declared]
    chat.validate(messages, [*tools, *history_only] or None)
    if messages[-1]["role"] == "assistant":
        raise TinyLMError("a prompt ends with a user, system or tool message, not an assistant one")
    return [*chat.render(messages, tools or None, check=False).ids, chat.role_ids["assistant"]]


def start_chat(served: ServedModel, body: ChatCompletionRequest, jobs: list[Job], prompt: ChatPrompt) -> Generation:
    """The chat jobs started, read by segment (a reply starts inside its call when the prompt forced one)."""
    agent_ids = served.chat_format.agent_ids if served.chat_format is not None else None
    return Generation(served.scheduler, served.tokenizer, jobs, body.stop_strings(), agent_ids,
                      "call" if prompt.forced is not None else "content").start()


def _tool_choice(served: ServedModel, body: ChatCompletionRequest, prompt: ChatPrompt) -> ChatPrompt:
    """The prompt with the opening of a call when tool_choice forces one; APIError for a choice it cannot honour."""
    choice = body.tool_choice
    if choice in (None, "auto", "none"):
        return prompt
    if not prompt.tools:
        raise APIError(400, "tool_choice asks for a tool call, but the request declares no tools", "tool_choice")
    chat = served.chat_format
    assert chat is not None and chat.agent_ids is not None  # tools were rendered
    if choice == "required":
        return ChatPrompt([*prompt.ids, chat.agent_ids[CALL]], prompt.tools, "")
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    declared = [tool_name(tool) for tool in prompt.tools]
    if choice.get("type") != "function" or name not in declared:  # type: ignore[union-attr]
        raise APIError(400, "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
                       f"{{'name': NAME}}}} naming a declared tool ({', '.join(map(str, declared))})", "tool_choice")
    forced = f"{name}\n"
    return ChatPrompt([*prompt.ids, chat.agent_ids[CALL], *chat.content_ids(forced)], prompt.tools, forced)


def stop_ids(served: ServedModel, body: Sampling, own: frozenset[int]) -> frozenset[int]:
    """The token ids that end a choice: the model's own (unless ignore_eos) and the request's."""
    extra = frozenset(body.stop_token_ids or ())
    if any(not 0 <= i < served.vocab_size for i in extra):
        raise APIError(400, f"stop_token_ids must be in [0, {served.vocab_size})", "stop_token_ids")
    return extra if body.ignore_eos else own | extra


def check_length(served: ServedModel, ids: list[int], param: str) -> None:
    if len(ids) > served.window:
        raise APIError(400, f"the prompt has {len(ids)} tokens, more than the model's window of {served.window}",
                       param, "context_length_exceeded")


def check_room(served: ServedModel, prompts: list[list[int]]) -> None:
    """A prompt that fills the window leaves no room for a single new token: refuse it, as OpenAI does.

    Answering with no token instead would mislead lm-eval, which reads an echo's last log-prob as the
    generated token's and so would silently drop the prompt's last token from its score.
    """
    full = next((ids for ids in prompts if len(ids) >= served.window), None)
    if full is not None:
        raise APIError(400, f"the prompt has {len(full)} tokens, the model's whole window: no room for a new token "
                       "(send max_tokens 0 to score the prompt alone)", "prompt", "context_length_exceeded")


def prompt_ids(served: ServedModel, prompt: str | list[str] | list[int] | list[list[int]]) -> list[list[int]]:
    """Each prompt as token ids (text is encoded; an empty prompt starts from end-of-text)."""
    if isinstance(prompt, str):
        prompts: list = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [prompt]
    else:
        prompts = list(prompt)
    if not prompts:
        raise APIError(400, "prompt must not be an empty list", "prompt")
    out = []
    for p in prompts:
        ids = served.tokenizer.encode(p) if isinstance(p, str) else list(p)
        if any(not 0 <= i < served.vocab_size for i in ids):
            raise APIError(400, f"prompt token ids must be in [0, {served.vocab_size})", "prompt")
        ids = ids or [served.tokenizer.eot_id]
        check_length(served, ids, "prompt")
        out.append(ids)
    return out


def _job(body: Sampling, ids: list[int], max_tokens: int, sample: int, stop_ids: frozenset[int],
         logprobs: int | None, prompt_logprobs: bool = False) -> Job:
    sampling = SamplingParams(temperature=body.temperature, top_k=body.top_k if body.top_k and body.top_k > 0 else None,
                              top_p=body.top_p if body.top_p < 1 else None, min_p=body.min_p or None)
    return Job(ids, max_tokens, sampling, on_event=lambda _: None,
               seed=None if body.seed is None else body.seed + sample, stop_ids=stop_ids,
               logprobs=logprobs, prompt_logprobs=prompt_logprobs)
