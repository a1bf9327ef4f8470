"""`tinylm pipeline` on a micro road (seconds): every stage runs on the one engine into its own folder, the
stage table holds every stage's scores, a second run skips everything, an interrupted stage resumes,
changed settings and unknown keys are one line."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from test_train_support import data_dir
from tinylm.checkpoint import list_checkpoints, read_checkpoint_config
from tinylm.cli.main import main
from tinylm.pipeline.config import load_pipeline_config
from tinylm.pipeline.road import PipelineResult, run_pipeline
from tinylm.pipeline.state import PipelineState

pytestmark = pytest.mark.usefixtures("one_thread")

MICRO_ROAD = """
task = "builtin:arith?digits=1&ops=+"
seed = 3
threads = 1

[prepare]
corpus = "{corpus}"
vocab_size = 300
dev_fraction = 0.2

[pretrain]
overrides = {{ vocab_size = 300, context_length = 64, n_embed = 32, n_head = 2, n_blocks = 1, n_kv_head = 1 }}
batch_size = 4
seq_len = 32
max_steps = {pretrain_steps}
warmup_steps = 1
eval_every = 0
eval_batches = 2
checkpoint_every = 2
log_every = 1

[sft]
batch_size = 4
max_steps = 4
warmup_steps = 1
eval_every = 0
train_examples = 32
eval_examples = 4
max_new_tokens = 4

[dpo]
batch_size = 4
max_steps = 2
warmup_steps = 0
eval_every = 0
train_examples = 16
eval_examples = 4
max_new_tokens = 4

[grpo]
batch_size = 2
group_size = 2
max_steps = 2
eval_every = 0
eval_examples = 4
max_new_tokens = 4

[eval]
examples = 4
batch_size = 4
bpb_batches = 2
max_new_tokens = 4
"""


def _road(tmp_path: Path, **changes: Any) -> Path:
    corpus = data_dir().parent / "corpus"  # the training tests' small generated corpus
    values = {"corpus": corpus, "pretrain_steps": 4, **changes}
    file = tmp_path / "road.toml"
    file.write_text(MICRO_ROAD.format(**values), encoding="utf-8")
    return file


def _pipeline(file: Path | None, out: Path, *flags: str) -> dict[str, Any]:
    """`tinylm pipeline [FILE] --out OUT --json FLAGS`'s result; no FILE runs the defaults."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        road = [str(file)] if file is not None else []
        assert main(["pipeline", *road, "--out", str(out), "--no-progress", "--json", *flags]) == 0
    return json.loads(buffer.getvalue().strip().splitlines()[-1])


def test_micro_pipeline_runs_every_stage_then_skips_them(tmp_path: Path) -> None:
    out = tmp_path / "road"
    result = _pipeline(_road(tmp_path), out, "--seed", "4", "--dtype", "fp32")
    assert [r["stage"] for r in result["rows"]] == ["pretrain", "sft", "dpo", "grpo"]
    assert result["held_out"] == 4  # the gains' n: [eval] examples
    assert result["rows"][0]["gain"] is None and result["rows"][1]["gain"]["paired"]
    for stage in ("pretrain", "sft", "dpo", "grpo"):  # the flags reach every stage (RL's fp32 is its own)
        train = read_checkpoint_config(list_checkpoints(out / stage)[-1])["train"]
        assert train["seed"] == 4 and train["dtype"] == "fp32", (stage, train["seed"], train["dtype"])
    assert result["ran"] == ["prepare", "pretrain", "sft", "dpo", "grpo", "eval"]
    task = "builtin:arith?digits=1&ops=+"
    assert [len(r["outcomes"][task]) for r in result["rows"]] == [4, 4, 4, 4]  # every problem's verdict, paired
    for row in result["rows"]:
        assert {"bpb", task, f"prefs:{task}"} <= set(row["scores"])
        assert (out / row["stage"] / "report.html").is_file()  # each stage's own card, with its eval scores
        assert "preference_accuracy" in (out / row["stage"] / "report.md").read_text()
    lineage = read_checkpoint_config(list_checkpoints(out / "grpo")[-1])["lineage"]
    assert [link["stage"] for link in lineage] == ["pretrain", "sft", "dpo", "rl"]
    card = (out / "report.md").read_text()
    assert "## Stage table" in card and "| grpo |" in card
    again = _pipeline(_road(tmp_path), out, "--seed", "4", "--dtype", "fp32")
    assert again["ran"] == [] and again["rows"] == result["rows"]


def test_an_unfinished_stage_resumes_and_changed_settings_are_refused(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "road"
    file = _road(tmp_path)
    config = load_pipeline_config(str(file))
    config.out, config.stages = str(out), ["pretrain"]
    config.sections["pretrain"]["progress"] = False
    run_pipeline(config, say=lambda line: None, progress=False)
    state = PipelineState(out)
    state.steps["pretrain"]["done"] = False  # as if killed after its step-2 checkpoint...
    state.note("pretrain")
    shutil.rmtree(list_checkpoints(out / "pretrain")[-1])  # ...before the final one
    result = run_pipeline(config, say=lambda line: None, progress=False)
    assert result.ran == ["pretrain", "eval"] and result.rows[0]["steps"] == 4
    capsys.readouterr()
    assert main(["pipeline", str(_road(tmp_path, pretrain_steps=6)), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "pretrain finished with other settings (changed: max_steps)" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("text,expected", [
    ("[sft]\nlrr = 1\n", "[sft] unknown key 'lrr'"),
    ("[sfft]\nlr = 1\n", "unknown table [sfft]"),
    ("tsk = 'x'\n", "unknown key 'tsk'"),
    ("[sft]\nbase = 'x'\n", "[sft] base is set by the pipeline"),
    ("[grpo]\ngroup_size = 'four'\n", "[grpo] group_size = 'four': expected int"),
    ("stages = ['pretrain', 'dpo']\n", "stages must be a prefix"),
    ("dtype = 'fp8'\n", "dtype = 'fp8': choose one of auto, fp32, bf16, fp16"),
])
def test_a_bad_pipeline_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                         expected: str) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(text, encoding="utf-8")
    assert main(["pipeline", str(file), "--out", str(tmp_path / "road")]) == 1
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not (tmp_path / "road").exists()


def test_the_default_road_is_made_of_real_stage_options() -> None:
    from tinylm.pipeline.config import DEFAULTS, parse_pipeline_config

    config = parse_pipeline_config({k: dict(v) for k, v in DEFAULTS.items()})  # every key known, every type right
    assert config.stages == ["pretrain", "sft", "dpo", "grpo"] and config.sections == DEFAULTS


@pytest.mark.slow
def test_the_default_road_gains_beyond_the_noise_at_every_stage(tmp_path: Path) -> None:
    """The defaults' claim, one row of docs/pipeline-command.md's table re-run (about 12 minutes on 2 cores):
    SFT, RPO and GRPO each gain on the 1,000 held-out sums, beyond the paired interval of the measurement."""
    result = _pipeline(None, tmp_path / "road", "--seed", "1", "--dtype", "fp32", "--threads", "2")
    assert result["held_out"] == 1000 and [r["stage"] for r in result["rows"]] == ["pretrain", "sft", "dpo", "grpo"]
    for row in result["rows"][1:]:
        gain = row["gain"]
        assert gain["paired"] and gain["points"] > 0 and gain["beyond_noise"], (row["stage"], gain)


@pytest.mark.parametrize("given", [["--out", "OUT", "--threads", "1", "--no-progress"], [],
                                   ["--out", "OUT", "--seed", "4", "--dtype", "fp32"],
                                   ["--config", "OPTIONS", "--out", "OUT", "--threads", "2", "--no-progress"]])
def test_an_interrupted_pipeline_names_the_exact_command_that_resumes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, given: list[str]) -> None:
    import tinylm.cli.commands.pipeline as command

    def interrupted(config: Any, progress: bool = True) -> PipelineResult:
        return PipelineResult(config.out, [], 0.0, ["prepare", "pretrain"], [], "sft")

    monkeypatch.setattr(command, "run_pipeline", interrupted)
    file = tmp_path / "my road.toml"
    file.write_text("seed = 3\n", encoding="utf-8")
    (tmp_path / "options.toml").write_text("threads = 2\n", encoding="utf-8")
    named = {"OUT": str(tmp_path / "the road"), "OPTIONS": str(tmp_path / "options.toml")}
    args = [str(file), *(named.get(a, a) for a in given)]
    assert main(["pipeline", *args]) == 130
    hint = capsys.readouterr().out.strip().splitlines()[-1]
    assert shlex.split(hint.split("`")[1]) == ["tinylm", "pipeline", *args]


def test_a_gain_is_paired_over_the_same_problems_with_its_95_percent_interval() -> None:
    import numpy as np

    from tinylm.pipeline.gains import paired_gain, stage_gains, unpaired_gain
    from tinylm.pipeline.table import table_rows

    rng = np.random.default_rng(0)
    before = rng.random(1000) < 0.6
    after = np.where(rng.random(1000) < 0.8, before, rng.random(1000) < 0.9)  # mostly the same answers
    as_text = ["".join("1" if v else "0" for v in x) for x in (before, after)]
    gain = paired_gain(*as_text)
    d = after.astype(float) - before.astype(float)  # the per-problem differences, by numpy
    assert gain.points == pytest.approx(d.mean()) and gain.paired
    assert gain.interval == pytest.approx(1.959964 * d.std() / np.sqrt(d.size))
    wide = unpaired_gain(before.mean(), after.mean(), 1000)
    assert wide.interval == pytest.approx(1.959964 * np.sqrt((before.mean() * (1 - before.mean())
                                                              + after.mean() * (1 - after.mean())) / 1000))
    assert gain.interval < wide.interval / 2  # pairing removes the noise the two models share
    assert paired_gain("1100", "1011").format() == "+25.0 ± 81.3"  # b = 2, c = 1, n = 4
    assert unpaired_gain(0.30, 0.40, 1000).format() == "+10.0 ± 4.2"
    assert not paired_gain("10", "01").beyond_noise
    with pytest.raises(ValueError):
        paired_gain("10", "1")
    task = "builtin:arith?digits=2&ops=+"
    rows = [{"stage": s, "steps": 1, "wall_s": 1.0, "scores": {task: {"exact_match": e}}}
            for s, e in (("pretrain", 0.0), ("sft", 0.3), ("dpo", 0.4))]
    assert stage_gains(rows, task, held_out=None) == [None, None, None]  # no outcomes, no n: no claim
    header, cells = table_rows(rows, task, held_out=1000)  # no outcomes: the unpaired interval
    assert header[:3] == ["stage", "exact-match", "gain"]
    assert [c[2] for c in cells] == ["", "+30.0 ± 2.8", "+10.0 ± 4.2"]


def test_the_help_tells_config_from_the_stage_file(capsys: pytest.CaptureFixture[str]) -> None:
    """--config (the command's own flags, as every command has) and the positional FILE (the stage tables) are
    two different files: the help says which is which (both read 'a TOML file' before)."""
    with pytest.raises(SystemExit):
        main(["pipeline", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--config FILE this command's own flags" in text
    assert "the stage tables ([pretrain], [sft]...) go in the positional FILE" in text
    assert "FILE TOML file of stage settings" in text
