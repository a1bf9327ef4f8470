"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a small model drafts, the big one checks.

Each round the draft model proposes k tokens x_1..x_k, sampling x_j from its distribution q_j. The
target model then scores all of them in ONE forward pass, which gives its own distributions
p_1..p_{k+1} at those positions. Walking left to right, draft token x_j is accepted with probability

    min(1, p_j(x_j) / q_j(x_j))

and at the first rejection a replacement is drawn from the residual distribution
normalize(max(0, p_j - q_j)); if all k are accepted, one bonus token comes from p_{k+1}. This
accept/reject rule makes every emitted token distributed exactly as p (the target's), whatever the
draft proposes: a good draft only makes it faster, a bad one only slower. With greedy decoding
(p and q one-hot) it reduces to "accept while the draft's argmax equals the target's", so the output
is token-identical to greedy decoding of the target alone, up to float rounding: the target scores k + 1
positions in one product where plain decoding scores one, two kernels whose sums can differ in the last
bit, so an exact tie between two logits could break the other way (none has in the tests or benchmarks).

Rejected drafts are rolled back by truncating both KV caches. Sampling filters (temperature, top-k,
top-p, min-p, repetition penalty) are applied to both p and q, so the output follows the target's
*filtered* distribution, as plain sampling would.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tinylm.errors import TinyLMError
from tinylm.inference.runners import make_runner
from tinylm.inference.sampling import SamplingParams, probabilities

DRAFT_TOKENS = 4  # k, the draft's tokens per round, unless told


@dataclass
class SpeculativeStats:
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_pass(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0


class SpeculativeDecoder:
    """A target, its draft and both caches, built once: every prompt after the first reuses them.

    Building the runners fuses and lays out both models' weights (the target's packed for k + 1 rows
    a call, `packed_float.py`): tens of milliseconds at `small`, a tenth of a 128-token answer.
    """

    def __init__(self, target: nn.Module, draft: nn.Module, k: int = DRAFT_TOKENS, packed_verifier: bool = True
                 ) -> None:
        """`packed_verifier=False`: the target decodes as for one row a call (the before of packed_float.py's
        measurement; the same tokens, slower)."""
        if target.config.vocab_size != draft.config.vocab_size:
            raise TinyLMError(f"draft vocabulary ({draft.config.vocab_size}) differs from the target's "
                              f"({target.config.vocab_size}): they must share a tokenizer")
        if k < 1:
            raise ValueError(f"k (draft tokens per round) must be >= 1, got {k}")
        self.target, self.draft, self.k = target, draft, k
        # each model keeps its own context: the target's is the engine's (so greedy output is the target's own);
        # the draft's only shapes its guesses, and is re-encoded from its last half whenever a round would overflow it
        self.window, self.d_window = target.config.context_length, draft.config.context_length
        self.device = next(target.parameters()).device
        with torch.inference_mode():
            # the target reads k + 1 tokens a round: its weights are laid out for that many rows
            self.t_run = make_runner(target, 1, self.window, rows_per_call=k + 1 if packed_verifier else 1)
            self.d_run = make_runner(draft, 1, self.d_window)

    def stream(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        sampling: SamplingParams | None = None,
        seed: int = 0,
        stop_ids: Iterable[int] = (),
        stats: SpeculativeStats | None = None,
    ) -> Iterator[int]:
        """Yield new token ids for one prompt as rounds produce them; stops before a stop token."""
        if not prompt:
            raise ValueError("the prompt needs at least one token (start an empty one with EOT)")
        sampling = sampling or SamplingParams()
        stats = stats if stats is not None else SpeculativeStats()
        stops, window, device = set(stop_ids), self.window, self.device
        keep = max(1, window // 2)
        d_keep = max(1, min(self.d_window // 2, self.d_window - self.k))  # room left for a round's drafts
        generator = torch.Generator(device=device).manual_seed(seed)
        with torch.inference_mode():
            self.target.eval()
            self.draft.eval()
            self.t_run.reset()
            self.d_run.reset()
            seq = list(prompt)[-window:]
            start = t_fed = d_start = d_fed = 0  # each model's context start and the tokens of `seq` it has read
            seen = None
            if sampling.needs_history:
                seen = torch.zeros(1, self.target.config.vocab_size, dtype=torch.bool, device=device)
                seen[0, torch.tensor(seq, device=device)] = True
            produced = 0
            while produced < max_new_tokens:
                if len(seq) - start > window:  # the engine's rule: re-encode the last `keep` tokens afresh
                    start = t_fed = len(seq) - keep
                    self.t_run.reset()
                # every position of this round must see the same context start, as in plain decoding
                n_draft = min(self.k, max_new_tokens - produced - 1, window - (len(seq) - start), self.d_window)
                base = len(seq)
                if base + n_draft - 1 - d_start > self.d_window:  # the draft would overflow its own context
                    d_start = d_fed = base - d_keep
                    self.d_run.reset()
                # 1. the draft proposes n_draft tokens, one cheap step each
                drafts, q_rows = self._propose(seq[d_fed:], n_draft, sampling, seen, generator)
                if n_draft:
                    d_fed = base + n_draft - 1
                # 2. the target scores the pending tokens and all drafts in one pass
                pending = seq[t_fed:]
                t_logits = self.t_run.extend(_ids(pending + drafts, device), last_only=False)[0, len(pending) - 1 :]
                # 3. accept/reject left to right
                accepted, new_token = self._check(drafts, q_rows, t_logits, sampling, seen, generator)
                # 4. roll both caches back to the accepted prefix
                t_fed = base + accepted
                self.t_run.truncate(t_fed - start)
                if n_draft:
                    d_fed = min(d_fed, base + accepted)
                    self.d_run.truncate(d_fed - d_start)
                stats.rounds += 1
                stats.proposed += len(drafts)
                stats.accepted += accepted
                for token in [*drafts[:accepted], new_token]:
                    if token in stops:
                        return
                    seq.append(token)
                    if seen is not None:
                        seen[0, token] = True
                    produced += 1
                    stats.emitted += 1
                    yield token

    def _propose(self, unread: list[int], n_draft: int, sampling: SamplingParams, seen: torch.Tensor | None,
                 generator: torch.Generator) -> tuple[list[int], list[torch.Tensor]]:
        """The draft reads the tokens it has not seen and proposes n_draft more: (tokens, its distribution q_j for
        each)."""
        drafts: list[int] = []
        q_rows: list[torch.Tensor] = []
        if not n_draft:
            return drafts, q_rows
        logits = self.d_run.extend(_ids(unread, self.device))[:, -1]
        seen_j = None if seen is None else seen.clone()
        for j in range(n_draft):
            q = probabilities(logits, sampling, seen_j)[0]
            x = int(q.argmax()) if sampling.greedy else int(torch.multinomial(q, 1, generator=generator))
            drafts.append(x)
            q_rows.append(q)
            if seen_j is not None:
                seen_j[0, x] = True
            if j < n_draft - 1:
                logits = self.d_run.extend(_ids([x], self.device))[:, -1]
        return drafts, q_rows

    def _check(self, drafts: list[int], q_rows: list[torch.Tensor], t_logits: torch.Tensor, sampling: SamplingParams,
               seen: torch.Tensor | None, generator: torch.Generator) -> tuple[int, int]:
        """(drafts accepted, the token after them): min(1, p/q) left to right, at the first rejection a draw from
        normalize(max(0, p - q)), after all of them a bonus token from the target's last row."""
        seen_j = None if seen is None else seen.clone()
        for j, x in enumerate(drafts):
            p = probabilities(t_logits[j : j + 1], sampling, seen_j)[0]
            if sampling.greedy:
                ok = bool(p[x] == 1)
            else:
                ok = float(torch.rand((), generator=generator, device=self.device)) * float(q_rows[j][x]) < float(p[x])
            if not ok:
                residual = (p - q_rows[j]).clamp(min=0)
                return j, _draw(residual if float(residual.sum()) > 0 else p, sampling, generator)
            if seen_j is not None:
                seen_j[0, x] = True
        p = probabilities(t_logits[len(drafts) : len(drafts) + 1], sampling, seen_j)[0]
        return len(drafts), _draw(p, sampling, generator)


def speculative_stream(
    target: nn.Module,
    draft: nn.Module,
    prompt: Sequence[int],
    max_new_tokens: int,
    k: int = DRAFT_TOKENS,
    sampling: SamplingParams | None = None,
    seed: int = 0,
    stop_ids: Iterable[int] = (),
    stats: SpeculativeStats | None = None,
) -> Iterator[int]:
    """Yield new token ids for one prompt as rounds produce them; stops before a stop token. (One prompt: to decode
    several, build one `SpeculativeDecoder` and call its `stream`.)"""
    decoder = SpeculativeDecoder(target, draft, k)
    yield from decoder.stream(prompt, max_new_tokens, sampling, seed, stop_ids, stats)


def speculative_generate(
    target: nn.Module,
    draft: nn.Module,
    prompt: Sequence[int],
    max_new_tokens: int,
    k: int = DRAFT_TOKENS,
    sampling: SamplingParams | None = None,
    seed: int = 0,
    stop_ids: Iterable[int] = (),
    stats: SpeculativeStats | None = None,
) -> list[int]:
    """New token ids for one prompt (without the stop token that ended it)."""
    return list(speculative_stream(target, draft, prompt, max_new_tokens, k, sampling, seed, stop_ids, stats))


def _ids(tokens: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([tokens], dtype=torch.long, device=device)


def _draw(probs: torch.Tensor, sampling: SamplingParams, generator: torch.Generator) -> int:
    if sampling.greedy:
        return int(probs.argmax())
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
