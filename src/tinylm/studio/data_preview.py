"""What a stage would train on, before it does: a data spec's first rows as tokens, the loss mask on each.

Each stage reads its data with its own loader and renders it its own way; the preview calls the same
code, the `preview` of the stage's row in the stage table (stages/*/preview.py), so the rows, the mask
and a bad row's "FILE:LINE: reason" are exactly what the command meets. Here they become token views.

A file is read whole, as the command reads it, so a bad row anywhere is reported; only the first rows
are sent. Chat stages use the tokenizer of the run named as the base, with the chat tokens added when
it lacks them (as the stage does). Local paths are resolved under the runs root and may not leave it:
the studio serves nothing from outside that folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.data.rows.hf_spec import is_hf_spec
from tinylm.errors import TinyLMError
from tinylm.stages import STAGES
from tinylm.stages.preview_rows import PreviewRow
from tinylm.studio.runs import StudioError, resolve_run
from tinylm.studio.tokens_view import run_tokenizer, token_pieces
from tinylm.tasks.registry import PREFIX as BUILTIN_PREFIX
from tinylm.tasks.registry import SOURCE_FORMS
from tinylm.tokenizer.tokenizer import Tokenizer

MAX_ROWS = 20


def local_path(root: Path, path: str) -> Path:
    """`path` (relative to the runs root, or absolute) as a path inside the root; StudioError (403) outside it."""
    resolved = (root / path).resolve()
    base = root.resolve()
    if resolved != base and base not in resolved.parents:
        raise StudioError(f"{path}: outside the runs root {root}; the studio reads only files under it", 403)
    return resolved


def _is_local(spec: str) -> bool:
    return not spec.startswith(BUILTIN_PREFIX) and not is_hf_spec(spec) and spec != "pystdlib"


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
        return spec if is_hf_spec(rest) else prefix + str(local_path(root, rest))
    return str(local_path(root, spec)) if _is_local(spec) else spec


def _row(row: PreviewRow, tokenizer: Tokenizer) -> dict[str, Any]:
    return {"label": row.label, "n_tokens": len(row.ids), "n_learn": sum(row.mask), **row.extra,
            "tokens": token_pieces(tokenizer, row.ids, row.mask)}


def preview(root: Path, stage: str, spec: str, run: str | None, limit: int = 5, seed: int = 0) -> dict[str, Any]:
    """The first `limit` rows `stage` would train on from `spec`, tokenized by `run`'s tokenizer."""
    if stage not in STAGES:
        raise StudioError(f"no stage {stage!r} (stages: {', '.join(STAGES)})", 404)
    if not spec:
        raise StudioError("give a data spec: builtin:TASK, a file under the runs root, or hf:NAME")
    limit = max(1, min(int(limit), MAX_ROWS))
    run_dir = resolve_run(root, run) if run else None
    tokenizer = run_tokenizer(run_dir) if run_dir is not None else None
    spec_row = STAGES[stage]
    if spec_row.preview is None:
        raise StudioError(f"the {stage} stage has no data preview", 404)
    if tokenizer is None and spec_row.starts_from_base:
        raise StudioError(f"{stage} renders rows with its base's tokenizer: choose the run it would start from")
    try:
        shown = spec_row.preview(rooted_spec(root, spec), tokenizer, limit, seed)
    except TinyLMError as exc:
        raise StudioError(str(exc)) from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # whatever else a file can do: one line, a 400
        raise StudioError(f"{spec}: {type(exc).__name__}: {exc}") from None
    return {"stage": stage, "data": spec, "rows": [_row(row, shown.tokenizer) for row in shown.rows],
            "notes": shown.notes}
