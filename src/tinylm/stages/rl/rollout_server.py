"""Rollouts from an inference server: `tinylm rl --rollout-url http://HOST:PORT`.

Generation dominates RL, so production setups (OpenRLHF, verl, TRL with vLLM) sample on an
inference engine and train elsewhere. Any OpenAI-compatible `/v1/completions` that returns token
log-probs will do (`tinylm serve`, vLLM, SGLang). Each round:

1. sync: the trainer writes the policy's weights (LoRA merged in) to RUN/rollout-weights and asks
   the server to serve them (`tinylm serve`: POST /admin/reload; `--rollout-sync none` leaves a
   server you sync yourself alone);
2. sample: one request per prompt, `n` = G, the prompt as token ids, and seed S * 1_000_003 for a
   prompt seeded S, so choice g uses the seed `row_seeds` gives row g in-process. `tinylm serve`
   draws a seeded request by inverse CDF from the same uniforms, so on the same weights in the same
   precision it returns the in-process rollouts token for token. The tokens come back as ids
   (vLLM's `return_tokens_as_token_ids`), and a response ends at the chat's stop ids only
   (`stop_token_ids`, `ignore_eos`), as in-process;
3. the server's log-probs are kept as `sampler_logp`; the trainer recomputes its own (`old_logp`),
   and the loss weighs each token by truncated importance sampling, min(pi_old / pi_sampler, C)
   (update.py), because an inference engine's numbers never quite match the trainer's.

A server that fails (gone, an error status, a malformed reply) fails the step with one line; the run
resumes exactly from its last checkpoint, since every round syncs before it samples.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch
from torch import nn

from tinylm.checkpoint import list_checkpoints, remove_checkpoint, save_checkpoint
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.inference.sampling import SamplingParams
from tinylm.models.lora import base_state_dict, has_lora, lora_modules, lora_state_dict, merged_weights
from tinylm.stages.rl.rollout import Rollouts, layout, row_seeds

TOKEN_ENV = "TINYLM_ROLLOUT_TOKEN"  # the bearer token sent to the server (its --api-key / --admin-token)
WEIGHTS = "rollout-weights"  # RUN/rollout-weights/checkpoints/step_N: what the server is told to load
SYNCS = ("reload", "none")


class RolloutServer:
    """The inference server a run samples from; every failure is one TinyLMError line naming it."""

    def __init__(self, url: str, timeout: float, sync: str = "reload", workers: int = 16) -> None:
        if not url.startswith(("http://", "https://")):
            raise TinyLMError(f"--rollout-url must be an http(s) URL, got {url!r}")
        self.url, self.sync_mode, self.workers = url.rstrip("/").removesuffix("/v1"), sync, workers
        token = os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.url, timeout=timeout, headers=headers)
        self.logprobs_mode: str | None = None
        self.model = self._model_name()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise TinyLMError(f"rollout server {self.url}{path}: {type(exc).__name__}: {exc or 'no reply'}") from None
        if response.status_code >= 400:
            raise TinyLMError(f"rollout server {self.url}{path}: HTTP {response.status_code}: {_message(response)}")
        try:
            return response.json()
        except ValueError:
            raise TinyLMError(f"rollout server {self.url}{path}: the reply is not JSON") from None

    def _model_name(self) -> str:
        models = self._call("GET", "/v1/models").get("data") or []
        if not models or "id" not in models[0]:
            raise TinyLMError(f"rollout server {self.url}: /v1/models lists no model")
        self.logprobs_mode = models[0].get("logprobs_mode")  # tinylm serve says; other servers may not
        return str(models[0]["id"])

    def check_temperature(self, temperature: float) -> None:
        """Raw log-probs are log softmax(z), the trainer's are log softmax(z / T): they agree at T = 1 only.

        And an OpenAI-compatible server samples at temperatures in [0, 2] (tinylm serve refuses more)."""
        if temperature > 2:
            raise TinyLMError(f"--temperature {temperature:g} is above 2, the most an OpenAI-compatible server (tinylm "
                              "serve too) samples at: use --temperature 2 or less, or sample in-process (no "
                              "--rollout-url)")
        if temperature != 1.0 and self.logprobs_mode == "raw":
            raise TinyLMError(f"--temperature {temperature:g} needs the log-probs of the tempered distribution, but "
                              f"{self.url} returns raw ones: start tinylm serve with --logprobs-mode processed")

    def describe(self) -> str:
        how = "POST /admin/reload each round" if self.sync_mode == "reload" else "never (--rollout-sync none)"
        return f"rollouts from {self.url} (model {self.model}), weights synced {how}"

    # ---- weights -----------------------------------------------------------------------------------
    def sync(self, run_dir: Path, round_index: int, policy: nn.Module, config: ModelConfig,
             tokenizer_file: Path | None) -> None:
        """Publish the policy's current weights and have the server load them (rank 0 only)."""
        if self.sync_mode == "none":
            return
        folder = publish_weights(run_dir / WEIGHTS, round_index, policy, config, tokenizer_file)
        self._call("POST", "/admin/reload", {"checkpoint": str(folder.resolve())})

    # ---- sampling ----------------------------------------------------------------------------------
    def sample(self, prompts: Sequence[Sequence[int]], group_size: int, max_new_tokens: int, sampling: SamplingParams,
               seeds: Sequence[int], stop_ids: Iterable[int], pad_id: int, vocab_size: int) -> Rollouts:
        """What `sample_rollouts` returns, drawn by the server; `logprobs` are the server's."""
        t0 = time.perf_counter()
        stops = sorted(set(stop_ids))
        bodies = [self._request(p, group_size, max_new_tokens, sampling, s, stops) for p, s in zip(prompts, seeds)]
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(bodies)))) as pool:
            replies = list(pool.map(lambda body: self._call("POST", "/v1/completions", body), bodies))
        rows = [list(p) for p in prompts for _ in range(group_size)]
        tokens = torch.full((len(rows), max_new_tokens), pad_id, dtype=torch.long)
        logprobs = torch.zeros(len(rows), max_new_tokens)
        lengths = torch.zeros(len(rows), dtype=torch.long)
        stopped = torch.zeros(len(rows), dtype=torch.bool)
        for p, reply in enumerate(replies):
            for g, (ids, lps) in enumerate(self._choices(reply, group_size, max_new_tokens, vocab_size)):
                i = p * group_size + g
                n = len(ids)
                tokens[i, :n], logprobs[i, :n], lengths[i] = torch.tensor(ids), torch.tensor(lps), n
                stopped[i] = n > 0 and ids[-1] in stops
        return layout(rows, tokens, logprobs, lengths, stopped, group_size, pad_id, generated=int(lengths.sum()),
                      seconds=time.perf_counter() - t0)

    def _request(self, prompt: Sequence[int], group_size: int, max_new_tokens: int, sampling: SamplingParams,
                 seed: int, stops: list[int]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model, "prompt": list(prompt), "n": group_size, "max_tokens": max_new_tokens,
            "temperature": sampling.temperature, "seed": row_seeds([seed], 1)[0], "logprobs": 0,
            "return_tokens_as_token_ids": True, "stop_token_ids": stops, "ignore_eos": True,
        }
        if sampling.top_k is not None:
            body["top_k"] = sampling.top_k
        if sampling.top_p is not None:
            body["top_p"] = sampling.top_p
        return body

    def _choices(self, reply: dict[str, Any], group_size: int, max_new_tokens: int, vocab_size: int
                 ) -> list[tuple[list[int], list[float]]]:
        """Each choice's (token ids, log-probs), in choice order, checked."""
        choices = sorted(reply.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != group_size:
            raise TinyLMError(f"rollout server {self.url}: {len(choices)} choices for n = {group_size}")
        out = []
        for choice in choices:
            logprobs = choice.get("logprobs") or {}
            names, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
            if names is None or values is None or len(names) != len(values):
                raise TinyLMError(f"rollout server {self.url}: a choice has no token log-probs (it must answer "
                                  "'logprobs' with 'tokens' and 'token_logprobs')")
            ids = [_token_id(name, self.url) for name in names]
            if len(ids) > max_new_tokens or any(not 0 <= i < vocab_size for i in ids):
                raise TinyLMError(f"rollout server {self.url}: a choice has {len(ids)} tokens (at most "
                                  f"{max_new_tokens}) or ids outside the vocabulary of {vocab_size}")
            if any(v is None for v in values):
                raise TinyLMError(f"rollout server {self.url}: a sampled token has no log-prob")
            out.append((ids, [float(v) for v in values]))
        return out

    def close(self) -> None:
        self.client.close()


def publish_weights(folder: Path, step: int, policy: nn.Module, config: ModelConfig,
                    tokenizer_file: Path | None) -> Path:
    """FOLDER/checkpoints/step_N with the policy's weights (adapters merged in), and nothing else there: after a
    resume the folder may hold a later round's weights, which must not outrank these."""
    weights = None
    if has_lora(policy):
        scale = next(m.scale for _, m in lora_modules(policy))
        weights = merged_weights(base_state_dict(policy), lora_state_dict(policy), scale)
    saved = save_checkpoint(folder, step, policy, config, state_dict=weights, tokenizer_file=tokenizer_file,
                            meta={"stage": "rl", "published_for": "rollouts"})
    for old in list_checkpoints(folder):
        if old != saved:
            remove_checkpoint(old)
    return saved


def _token_id(name: Any, url: str) -> int:
    if not isinstance(name, str) or not name.startswith("token_id:"):
        raise TinyLMError(f"rollout server {url}: tokens come back as {name!r}, not 'token_id:N' (the server must "
                          "support return_tokens_as_token_ids, as tinylm serve and vLLM do)")
    return int(name.removeprefix("token_id:"))


def _message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        return str(error.get("message") if isinstance(error, dict) else error or response.text[:200])
    except (ValueError, AttributeError):
        return response.text[:200].strip() or response.reason_phrase
