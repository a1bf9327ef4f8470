"""The stage table: one row per stage's model, the same measurements in every row, so the gains read down.

    stage     exact-match  gain          pref. acc  bpb    steps  wall
    pretrain  (the task's held-out exact-match, its change from the stage before with the 95% interval
    sft        of that change from sampling the held-out problems, preference accuracy on held-out pairs,
    dpo        bits per byte on the pretraining corpus's dev split; the stage's steps and wall time)
    grpo

A gain whose interval excludes zero (`+12.4 ± 3.6`) is beyond the noise of the measurement: see
gains.py for the paired interval. It is printed at the end of `tinylm pipeline` and heads
OUT/report.md and OUT/report.html, followed by the final model's own report card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinylm.evaluate.report_card import Section, gather, write_card
from tinylm.pipeline.gains import stage_gains
from tinylm.stages import report_curves

COLUMNS = (("exact-match", "exact_match", "{:.1%}"), ("pref. acc", "preference_accuracy", "{:.1%}"),
           ("bpb", "bpb", "{:.3f}"))


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"


def table_rows(rows: list[dict[str, Any]], task: str, held_out: int | None = None
               ) -> tuple[list[str], list[list[str]]]:
    """(header, cells): exact-match on `task` and its gain over the row before (gains.py; `held_out` problems
    when the rows lack per-problem outcomes), preference accuracy on its pairs, bpb on the pretraining corpus."""
    names = [name for name, _, _ in COLUMNS]
    header = ["stage", names[0], "gain", *names[1:], "steps", "wall"]
    sources = {"exact_match": task, "preference_accuracy": f"prefs:{task}", "bpb": "bpb"}
    cells = []
    for row, gain in zip(rows, stage_gains(rows, task, held_out), strict=True):
        values = []
        for _, metric, fmt in COLUMNS:
            value = row["scores"].get(sources[metric], {}).get(metric)
            values.append(fmt.format(value) if value is not None else "")
        cells.append([row["stage"], values[0], gain.format() if gain else "", *values[1:], str(row["steps"]),
                      _minutes(row["wall_s"])])
    return header, cells


def format_table(header: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *cells])


def write_pipeline_card(out: Path, header: list[str], cells: list[list[str]], wall_s: float,
                        final_run: Path) -> Path:
    """OUT/report.md and OUT/report.html: the stage table, then the final stage's card."""
    _, final_sections = gather(final_run, report_curves)
    sections = [Section("Stage table", text=[f"total wall time {_minutes(wall_s)}; each stage's own card is "
                                             "report.html in its folder"], table=(header, cells)),
                *(Section(f"Final model: {s.title}", s.text, s.table, s.figures, s.code) for s in final_sections)]
    return write_card(out, f"tinylm pipeline: {out.resolve().name}", sections)
