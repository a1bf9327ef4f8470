"""What a stage would train on, before it does: a data spec's first rows as tokens, the loss mask on each.

Each stage reads its data with its own loader and renders it its own way; the preview calls the same
code, so the rows, the mask and a bad row's "FILE:LINE: reason" are exactly what the command meets:

    sft            conversations (load_conversations) rendered by the chat format: the mask is 1 on the
                   assistant's content and the <|end|> closing it
    dpo, reward    preference rows (load_preferences): the prompt, then each answer; the mask on the answer
    rl             the task's prompts (get_task): nothing is learned from a prompt itself (mask 0); the
                   reference answer the verifier checks is shown beside it
    pretrain       a prepared data folder (train.bin, through its own tokenizer) or a corpus (a file, folder
                   or glob of text, or pystdlib) through a run's tokenizer, cut into windows: every token learns

A file is read whole, as the command reads it, so a bad row anywhere is reported; only the first rows
are sent. Chat stages use the tokenizer of the run named as the base, with the chat tokens added when
it lacks them (as the stage does). Local paths are resolved under the runs root and may not leave it:
the studio serves nothing from outside that folder.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tinylm.data.shards import open_shard
from tinylm.data.sources import open_corpus
from tinylm.errors import TinyLMError
from tinylm.stages import STAGES
from tinylm.stages.preference.data import load_preferences
from tinylm.stages.preference.pair_rows import answer_ids
from tinylm.stages.sft.data import load_conversations
from tinylm.studio.runs import StudioError, resolve_run
from tinylm.studio.tokens_view import run_tokenizer, token_pieces
from tinylm.tasks.registry import PREFIX as BUILTIN_PREFIX
from tinylm.tasks.registry import SOURCE_FORMS, get_task
from tinylm.tokenizer.chat_format import ChatFormat
from tinylm.tokenizer.chat_tokens import with_chat_tokens
from tinylm.tokenizer.load import load_tokenizer
from tinylm.tokenizer.tokenizer import Tokenizer

MAX_ROWS = 20
WINDOW = 128  # tokens per pretraining row shown


def local_path(root: Path, path: str) -> Path:
    """`path` (relative to the runs root, or absolute) as a path inside the root; StudioError (403) outside it."""
    resolved = (root / path).resolve()
    base = root.resolve()
    if resolved != base and base not in resolved.parents:
        raise StudioError(f"{path}: outside the runs root {root}; the studio reads only files under it", 403)
    return resolved


def _is_local(spec: str) -> bool:
    return not spec.startswith((BUILTIN_PREFIX, "hf:")) and spec != "pystdlib"


def rooted_spec(root: Path, spec: str) -> str:
    """`spec` with every local file it names resolved under the runs root (StudioError 403 outside it): a
    path, the file of `gsm8k:`/`prompts:`, and a built-in task's `file=` parameter."""
    if spec.startswith(BUILTIN_PREFIX):
        name, sep, query = spec.partition("?")
        items = [f"file={local_path(root, item[5:])}" if item.startswith("file=") else item
                 for item in query.split("&")]
        return name + sep + "&".join(items)
    prefix = next((p for p in SOURCE_FORMS if spec.startswith(p)), None)
    if prefix is not None:
        rest = spec[len(prefix):]
        return spec if rest.startswith("hf:") else prefix + str(local_path(root, rest))
    return str(local_path(root, spec)) if _is_local(spec) else spec


def _chat(tokenizer: Tokenizer, notes: list[str]) -> ChatFormat:
    """The chat format the stage would use: the base's tokenizer with the chat tokens added if it lacks them."""
    with_chat, added = with_chat_tokens(tokenizer)
    if added:
        notes.append(f"the chat token(s) {', '.join(added)} added to {tokenizer.name}, as the stage adds them")
    return ChatFormat.from_tokenizer(with_chat)


def _row(label: str, tokenizer: Tokenizer, ids: list[int], mask: list[int], **extra: Any) -> dict[str, Any]:
    return {"label": label, "n_tokens": len(ids), "n_learn": sum(mask), **extra,
            "tokens": token_pieces(tokenizer, ids, mask)}


def sft_rows(spec: str, tokenizer: Tokenizer, limit: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    notes: list[str] = []
    chat = _chat(tokenizer, notes)
    loaded = load_conversations(spec, "train", seed=seed, limit=_generated(spec, limit))
    rows = []
    for number, messages in enumerate(loaded.conversations[:limit], 1):
        rendered = chat.render(messages)
        rows.append(_row(f"conversation {number}", chat.tokenizer, rendered.ids, rendered.mask))
    return rows, _with_loading_notes(notes, loaded)


def pair_rows(spec: str, tokenizer: Tokenizer, limit: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    notes: list[str] = []
    chat = _chat(tokenizer, notes)
    loaded = load_preferences(spec, "train", seed=seed, limit=_generated(spec, limit))
    rows = []
    for number, pair in enumerate(loaded.rows[:limit], 1):
        prompt = chat.prompt_ids(list(pair.prompt))
        for side, text in (("chosen", pair.chosen), ("rejected", pair.rejected)):
            if text is not None:
                answer = answer_ids(chat, text)
                rows.append(_row(f"pair {number} {side}", chat.tokenizer, prompt + answer,
                                 [0] * len(prompt) + [1] * len(answer)))
    return rows, _with_loading_notes(notes, loaded)


def _generated(spec: str, limit: int) -> int | None:
    """The loader's limit: a built-in set is generated only `limit` rows long; a file is loaded whole (its split
    and its skipped rows are the file's), and the preview shows its first `limit` rows."""
    return limit if spec.startswith(BUILTIN_PREFIX) else None


def _with_loading_notes(notes: list[str], loaded: Any) -> list[str]:
    """The preview's notes, then the loader's, then each skipped row."""
    return [*notes, *loaded.notes, *(f"skipped {s}" for s in loaded.skipped)]


def prompt_rows(spec: str, tokenizer: Tokenizer, limit: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    notes = ["RL learns from the replies it samples: a prompt's own tokens carry no loss"]
    chat = _chat(tokenizer, notes)
    examples = get_task(spec).examples("train", limit, seed)
    rows = []
    for number, example in enumerate(examples[:limit], 1):
        ids = chat.prompt_ids(example.prompt)
        rows.append(_row(f"prompt {number}", chat.tokenizer, ids, [0] * len(ids), answer=example.answer))
    return rows, notes


def text_rows(spec: Path | str, tokenizer: Tokenizer | None, limit: int, window: int
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """Windows of `window` tokens from a prepared folder's train.bin, or from a corpus encoded by `tokenizer`."""
    folder = Path(spec) if isinstance(spec, Path) else None
    if folder is not None and (folder / "train.bin").is_file():
        tokens, _ = open_shard(folder / "train.bin")
        tokenizer = load_tokenizer(folder)
        ids = [int(i) for i in tokens[: window * limit]]
        note = f"{folder.name}/train.bin, through the folder's own tokenizer"
    else:
        if tokenizer is None:
            raise StudioError("a corpus preview needs a tokenizer: choose a run")
        ids = []
        for document in open_corpus(str(spec)).documents():
            ids += [tokenizer.eot_id, *tokenizer.encode_ordinary(document)]
            if len(ids) >= window * limit:
                break
        note = f"documents of {spec}, each after <|endoftext|>, through {tokenizer.name}"
    rows = [_row(f"window {n + 1}", tokenizer, ids[start:start + window], [1] * len(ids[start:start + window]))
            for n, start in enumerate(range(0, min(len(ids), window * limit), window))]
    return rows, [note]


def _rl_task(spec: str) -> str:
    """The task spec tinylm rl reads for `spec` (a bare FILE.jsonl is a file of prompts)."""
    return dataclasses.replace(STAGES["rl"].default_config(), task=spec).task_spec()


def preview(root: Path, stage: str, spec: str, run: str | None, limit: int = 5, seed: int = 0) -> dict[str, Any]:
    """The first `limit` rows `stage` would train on from `spec`, tokenized by `run`'s tokenizer."""
    if stage not in STAGES:
        raise StudioError(f"no stage {stage!r} (stages: {', '.join(STAGES)})", 404)
    if not spec:
        raise StudioError("give a data spec: builtin:TASK, a file under the runs root, or hf:NAME")
    limit = max(1, min(int(limit), MAX_ROWS))
    run_dir = resolve_run(root, run) if run else None
    tokenizer = run_tokenizer(run_dir) if run_dir is not None else None
    try:
        task = rooted_spec(root, _rl_task(spec) if stage == "rl" else spec)
        if stage == "pretrain":
            rows, notes = text_rows(Path(task) if _is_local(spec) else task, tokenizer, limit, WINDOW)
        else:
            if tokenizer is None:
                raise StudioError(f"{stage} renders rows with its base's tokenizer: choose the run it would start from")
            read = {"sft": sft_rows, "dpo": pair_rows, "reward": pair_rows, "rl": prompt_rows}[stage]
            rows, notes = read(task, tokenizer, limit, seed)
    except TinyLMError as exc:
        raise StudioError(str(exc)) from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # whatever else a file can do: one line, a 400
        raise StudioError(f"{spec}: {type(exc).__name__}: {exc}") from None
    return {"stage": stage, "data": spec, "rows": rows, "notes": notes}
