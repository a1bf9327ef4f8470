"""The report card of a run: report.md and a self-contained report.html, rebuilt from what the run left.

Everything comes from files already in the run folder, so the card can be rebuilt at any time
(`tinylm report --run RUN`) and `tinylm eval` refreshes it after appending its scores:

- the newest checkpoint's config.json: the model, its stage, data and lineage (base -> SFT -> ...);
- metrics.jsonl: steps, tokens, training time, tokens/s, MFU, and the curves (loss, rewards, the
  stage's evaluations);
- evals.jsonl: every `tinylm eval` of the run's checkpoints, with a few sample replies.

The card is built once as sections of tables, text and figures, then written twice: Markdown, with
the figures as PNG files beside it, and HTML with the same figures inlined as base64 data, so the
page opens anywhere with no network and nothing else next to it.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinylm.checkpoint import read_checkpoint_config, resolve_checkpoint
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError, io_failure
from tinylm.evaluate.scores import read_evaluations
from tinylm.metrics import METRICS, read_metrics
from tinylm.models.factory import build_model

REPORT_MD, REPORT_HTML = "report.md", "report.html"
Curves = dict[str, tuple[str, ...]]  # figure -> the metric keys drawn in it, when the run logged them
# a run's stage -> its figures: the stage table's (stages.report_curves), which evaluate cannot import
CurvesOf = Callable[[str | None], Curves]


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    table: tuple[list[str], list[list[str]]] | None = None
    figures: list[tuple[str, bytes]] = field(default_factory=list)  # (name, PNG bytes)
    code: list[str] = field(default_factory=list)


def _number(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}" if math.isfinite(value) else str(value)


# ---- gathering ----------------------------------------------------------------------------------------
def _model_section(meta: dict[str, Any]) -> Section:
    import torch


    config = ModelConfig.from_dict(meta["model"])
    with torch.device("meta"):
        model = build_model(config)
    shape = {k: config.to_dict()[k] for k in ("arch", "vocab_size", "context_length", "n_embed", "n_head", "n_blocks")}
    rows = [[k, _number(v)] for k, v in shape.items()]
    rows += [["parameters", _number(model.num_params())],
             ["non-embedding parameters", _number(model.num_params(non_embedding=True))]]
    return Section("Model", table=(["", ""], rows))


def _lineage_section(meta: dict[str, Any]) -> Section:
    links = [link for link in meta.get("lineage") or [] if isinstance(link, dict)]
    chain = " -> ".join(str(link.get("stage")) for link in links) or str(meta.get("stage", "?"))
    rows = [[str(link.get("stage")), str(link.get("from") or "(fresh)"), str(link.get("data")), str(link.get("run"))]
            for link in links]
    return Section("Lineage", text=[chain], table=(["stage", "from", "data", "run"], rows) if rows else None)


def _training_section(rows: list[dict[str, Any]], meta: dict[str, Any]) -> Section:
    steps = [r for r in rows if isinstance(r.get("tokens_per_s"), (int, float))]
    last = steps[-1] if steps else {}
    rates = [r["tokens_per_s"] for r in steps]
    mfus = [r["mfu"] for r in steps if isinstance(r.get("mfu"), (int, float))]
    wall = max((r["elapsed_s"] for r in rows if isinstance(r.get("elapsed_s"), (int, float))), default=None)
    table = [["stage", str(meta.get("stage", "?"))], ["data", str(meta.get("data", "?"))],
             ["steps", _number(last.get("step", meta.get("step")))], ["tokens", _number(last.get("tokens"))],
             ["training time (s)", _number(wall)],
             ["tokens/s (mean of logged windows)", _number(sum(rates) / len(rates)) if rates else ""],
             ["MFU", f"{sum(mfus) / len(mfus):.2%}" if mfus else "n/a (no peak FLOPs known)"]]
    finals = [r for r in rows if "tokens_per_s" not in r and len(r) > 2]  # evaluation rows
    if finals:
        table += [[f"last evaluation: {k}", _number(v)] for k, v in finals[-1].items() if k not in ("step", "tokens")]
    return Section("Training", table=(["", ""], table))


def _curve_png(rows: list[dict[str, Any]], keys: tuple[str, ...], title: str) -> bytes | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {k: [(r["step"], r[k]) for r in rows if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
              for k in keys}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for key, points in series.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, label=key)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def curves_section(rows: list[dict[str, Any]], curves: Curves) -> Section:
    section = Section("Curves")
    for name, keys in curves.items():
        png = _curve_png(rows, keys, name)
        if png is not None:
            section.figures.append((name, png))
    if not section.figures:
        section.text.append("nothing logged")
    return section


def _evals_sections(evaluations: list[dict[str, Any]]) -> list[Section]:
    if not evaluations:
        return [Section("Evaluation", text=["no `tinylm eval` yet"])]
    rows = []
    for e in evaluations:
        for task, metrics in e["scores"].items():
            for metric, value in metrics.items():
                rows.append([f"{e.get('stage')} step {e.get('step')}", task, metric, _number(value)])
    section = Section("Evaluation", table=(["checkpoint", "task", "metric", "value"], rows))
    samples = Section("Samples")
    for task, items in (evaluations[-1].get("samples") or {}).items():
        for item in items[:3]:
            verdict = "ok " if item.get("ok") else "bad"
            samples.code.append(f"[{task}] {verdict} {item.get('prompt')!r} -> {item.get('reply')!r}")
    return [section, samples] if samples.code else [section]


def gather(run: Path, curves_of: CurvesOf) -> tuple[str, list[Section]]:

    checkpoint = resolve_checkpoint(run)
    meta = read_checkpoint_config(checkpoint)
    rows = read_metrics(run, say=lambda line: None) if (run / METRICS).is_file() else []
    sections = [_model_section(meta), _lineage_section(meta), _training_section(rows, meta),
                curves_section(rows, curves_of(meta.get("stage"))), *_evals_sections(read_evaluations(run))]
    return f"{run.resolve().name}: {meta.get('stage', '?')} checkpoint {checkpoint.name}", sections


# ---- writing ------------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, sections: list[Section], figure_files: dict[str, str]) -> str:
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        if s.text:
            lines += [*s.text, ""]
        if s.table is not None:
            header, rows = s.table
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
            lines.append("")
        if s.figures:
            lines += [*(f"![{name}]({figure_files[name]})" for name, _ in s.figures), ""]
        if s.code:
            lines += ["```", *s.code, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_html(title: str, sections: list[Section]) -> str:
    e = html.escape
    parts = ["<!doctype html>", '<html><head><meta charset="utf-8">', f"<title>{e(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
             "pre{background:#f4f4f4;padding:.6em;overflow-x:auto}</style></head><body>", f"<h1>{e(title)}</h1>"]
    for s in sections:
        parts.append(f"<h2>{e(s.title)}</h2>")
        parts += [f"<p>{e(t)}</p>" for t in s.text]
        if s.table is not None:
            header, rows = s.table
            parts.append("<table>")
            if any(header):
                parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
            parts.append("</table>")
        for name, png in s.figures:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<p><img alt="{e(name)}" src="data:image/png;base64,{data}"></p>')
        if s.code:
            parts.append("<pre>" + e("\n".join(s.code)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_card(folder: Path, title: str, sections: list[Section]) -> Path:
    """Write folder/report.md (figures as report-NAME.png beside it) and folder/report.html; the HTML's path."""
    files = {name: f"report-{name}.png" for s in sections for name, _ in s.figures}
    try:
        for s in sections:
            for name, png in s.figures:
                (folder / files[name]).write_bytes(png)
        (folder / REPORT_MD).write_text(to_markdown(title, sections, files), encoding="utf-8")
        (folder / REPORT_HTML).write_text(to_html(title, sections), encoding="utf-8")
    except OSError as exc:
        raise TinyLMError(f"cannot write the report card into {folder}: {io_failure(exc) or exc}") from None
    return folder / REPORT_HTML


def write_report_card(run: str | Path, curves_of: CurvesOf) -> Path:
    """(Re)build a run's report card from its folder; returns the HTML's path."""
    run = Path(run)
    if not run.is_dir():
        raise TinyLMError(f"run folder not found: {run}")
    return write_card(run, *gather(run, curves_of))
