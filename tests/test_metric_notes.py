"""Every metric a training stage can write to metrics.jsonl has a note (unit, one line) for the studio's charts.

The keys are found where the code writes them, by reading its syntax tree: the training loop's `logger.log({...})`,
every dict a stage builds under a name ending in `metrics` (a step's logged means), the dicts its `evaluate` and
`held_out_*` methods return, and the `dev_` + name of each `*_SUMS` tuple of held-out sums. A real run's rows
check the scan against what the loop writes.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import httpx
import pytest

from studio_support import studio
from test_train_support import cli_args
from tinylm.cli.main import main
from tinylm.studio.metric_notes import NOTES, notes_json

SOURCES = [Path(__file__).parents[1] / "src" / "tinylm" / part for part in ("stages", "train")]
EVALUATIONS = ("evaluate", "held_out", "pair_means")  # functions whose dicts are an evaluation's row
FOLDED = {"dev_paired", "dev_label_right", "dev_sides"}  # held-out sums pair_means turns into scores, never logged


def _name(node: ast.AST) -> str:
    """`metrics`, `token_metrics`, `self.totals.metrics` -> the last name; anything else -> ""."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _keys(node: ast.AST | None) -> set[str]:
    if not isinstance(node, ast.Dict):
        return set()
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _metric_keys_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    evaluations = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name.startswith(EVALUATIONS)]
    for function in evaluations:
        for node in ast.walk(function):
            if isinstance(node, ast.Return):
                found |= _keys(node.value)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                found.add(node.slice.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
                found |= {k.arg for k in node.keywords if k.arg}  # result.update(dev_x=...)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if _name(target).endswith("metrics"):
                    found |= _keys(node.value)
                elif isinstance(target, ast.Subscript) and _name(target.value).endswith("metrics") \
                        and isinstance(target.slice, ast.Constant):
                    found.add(target.slice.value)
                elif _name(target).endswith("_SUMS") and isinstance(node.value, ast.Tuple):
                    found |= {f"dev_{e.value}" for e in node.value.elts if isinstance(e, ast.Constant)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            owner = _name(node.func.value)
            if (node.func.attr == "log" and owner == "logger") or (node.func.attr == "update"
                                                                  and owner.endswith("metrics")):
                found |= _keys(node.args[0])
    return found


def logged_keys() -> set[str]:
    """Every metrics.jsonl key the training code can write."""
    found: set[str] = set()
    for folder in SOURCES:
        for file in sorted(folder.rglob("*.py")):
            found |= _metric_keys_in(ast.parse(file.read_text(encoding="utf-8"), str(file)))
    return found - FOLDED


def test_every_metric_the_stages_can_log_has_a_note() -> None:
    keys = logged_keys()
    # the scan finds each kind of site: the loop's row, a stage's step metrics, an evaluation, the held-out sums
    assert {"loss", "grad_norm", "tis_weight", "kto_z0", "sync_s", "tool_calls", "dev_bpb", "exact_match",
            "dev_accuracy", "dev_label_accuracy"} <= keys
    assert sorted(keys - NOTES.keys()) == [], "a metric without a note in src/tinylm/studio/metric_notes.py"
    assert sorted(NOTES.keys() - keys) == [], "a note for a metric no stage logs"
    for name, (_, meaning) in NOTES.items():
        assert meaning and "\n" not in meaning and len(meaning) < 200, name


@pytest.mark.usefixtures("one_thread")
def test_a_real_runs_rows_are_all_explained_and_served(tmp_path: Path) -> None:
    assert main(cli_args(tmp_path / "run", "--max-steps", "3", "--eval-every", "2")) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    written = set().union(*rows)
    assert {"loss", "grad_norm", "dev_loss", "dev_bpb"} <= written
    assert written <= logged_keys()  # the scan sees what the loop writes
    with studio(tmp_path) as url:
        assert httpx.get(f"{url}/api/metric-notes").json() == {"notes": notes_json()}
