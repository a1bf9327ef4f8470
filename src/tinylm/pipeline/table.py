"""The stage table: one row per stage's model, the same measurements in every row, so the gains read down.

    stage     exact-match  pref. acc  bpb    steps  wall
    pretrain  (the task's held-out exact-match, preference accuracy on its held-out pairs, bits per
    sft        byte on the pretraining corpus's dev split; the stage's steps and wall time)
    dpo
    grpo

It is printed at the end of `tinylm pipeline` and heads OUT/report.md and OUT/report.html, followed by
the final model's own report card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.evaluate.report_card import Section, gather, write_card

COLUMNS = (("exact-match", "exact_match", "{:.1%}"), ("pref. acc", "preference_accuracy", "{:.1%}"),
           ("bpb", "bpb", "{:.3f}"))


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"


def table_rows(rows: list[dict[str, Any]], task: str) -> tuple[list[str], list[list[str]]]:
    """(header, cells): exact-match on `task`, preference accuracy on its pairs, bpb on the pretraining corpus."""
    header = ["stage", *(name for name, _, _ in COLUMNS), "steps", "wall"]
    sources = {"exact_match": task, "preference_accuracy": f"prefs:{task}", "bpb": "bpb"}
    cells = []
    for row in rows:
        values = []
        for _, metric, fmt in COLUMNS:
            value = row["scores"].get(sources[metric], {}).get(metric)
            values.append(fmt.format(value) if value is not None else "")
        cells.append([row["stage"], *values, str(row["steps"]), _minutes(row["wall_s"])])
    return header, cells


def format_table(header: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *cells])


def write_pipeline_card(out: Path, header: list[str], cells: list[list[str]], wall_s: float,
                        final_run: Path) -> Path:
    """OUT/report.md and OUT/report.html: the stage table, then the final stage's card."""
    _, final_sections = gather(final_run)
    sections = [Section("Stage table", text=[f"total wall time {_minutes(wall_s)}; each stage's own card is "
                                             "report.html in its folder"], table=(header, cells)),
                *(Section(f"Final model: {s.title}", s.text, s.table, s.figures, s.code) for s in final_sections)]
    return write_card(out, f"tinylm pipeline: {out.resolve().name}", sections)
