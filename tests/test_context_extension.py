"""`tinylm train --extend`: a trained checkpoint continues at a longer context with a RoPE scaling rule, its
weights exactly where the base left them, and every way to ask for it wrongly is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from test_train_support import MICRO, config, losses
from tinylm.checkpoint import checkpoint_model_config, list_checkpoints, read_weights
from tinylm.cli.main import main
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain.extend import document_counts, extended_config

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A micro model trained at 32 tokens."""
    out = tmp_path_factory.mktemp("base")
    pretrain(config(out, seq_len=32, max_steps=4))
    return out


def test_a_run_continues_at_four_times_the_context_with_yarn(base_run: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "long"
    capsys.readouterr()
    summary = pretrain(config(out, extend=str(base_run), seq_len=128, max_steps=2, overrides={
        "context_length": 128, "rope_scaling": "yarn"}))
    said = capsys.readouterr().err
    assert "note: rope_factor=4: 128 tokens over the 32 the model was trained at" in said
    assert f"extend: {base_run} from 32 to 128 tokens, yarn x4, weights only" in said
    assert "train documents are longer than the 32 tokens the model was trained at" in said
    mcfg = checkpoint_model_config(list_checkpoints(out)[-1])
    assert (mcfg.context_length, mcfg.rope_scaling, mcfg.rope_factor, mcfg.rope_original_context) == (
        128, "yarn", 4.0, 32)
    assert {k: getattr(mcfg, k) for k in MICRO if k != "context_length"} == {
        k: v for k, v in MICRO.items() if k != "context_length"}
    assert summary.steps == 2 and len(losses(out)) == 2


def test_the_extension_starts_from_the_bases_weights(base_run: Path, tmp_path: Path) -> None:
    """At an lr of 1e-9 one step moves nothing visibly: the extended run's weights are the base's (a fresh init
    would differ by ~0.02 everywhere)."""
    out = tmp_path / "still"
    pretrain(config(out, extend=str(base_run), seq_len=64, max_steps=1, lr=1e-9, muon_lr=1e-9,
                    overrides={"context_length": 64, "rope_scaling": "linear"}))
    base = read_weights(list_checkpoints(base_run)[-1])
    extended = read_weights(list_checkpoints(out)[-1])
    assert base.keys() == extended.keys()
    for name in base:
        torch.testing.assert_close(extended[name], base[name], rtol=0, atol=1e-6)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"rope_scaling": "yarn"}, "--extend needs a longer context than the checkpoint's 32 tokens (no --set "
                               "context_length): pass --set context_length=N with N > 32"),
    ({"context_length": 16, "rope_scaling": "yarn"}, "(context_length=16)"),
    ({"context_length": 128, "n_embed": 64}, "--extend changes the context only: n_embed stays the checkpoint's"),
    ({"context_length": 128, "rope_scaling": "yarn", "rope_factor": 0.5}, "rope_factor=0.5: must be >= 1"),
    ({"context_length": 128, "rope_scaling": "linear", "yarn_beta_fast": 8.0},
     "yarn_beta_fast=8.0: is a YaRN field: set rope_scaling=yarn"),
])
def test_bad_extensions_are_one_line_before_any_training(base_run: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str], overrides: dict,
                                                          message: str) -> None:
    args = ["train", "--extend", str(base_run), "--data", str(config(None).data), "--out", str(tmp_path / "x"),
            "--max-steps", "1", "--no-progress", "--threads", "1"]
    for name, value in overrides.items():
        args += ["--set", f"{name}={value}"]
    assert main(args) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not list_checkpoints(tmp_path / "x")


def test_a_classic_model_cannot_be_extended() -> None:
    classic = ModelConfig(arch="classic", vocab_size=97, context_length=32, n_embed=32, n_head=2)
    with pytest.raises(TinyLMError, match="classic model's positions are a learned table of 32 rows"):
        extended_config(classic, {"context_length": 128, "rope_scaling": "yarn"})


def test_without_a_rule_the_run_is_plain_rope_and_says_so() -> None:
    base = ModelConfig(vocab_size=97, context_length=32, n_embed=32, n_head=2)
    extended, notes = extended_config(base, {"context_length": 64})
    assert extended.rope_scaling == "none" and extended.context_length == 64
    assert notes[0].startswith("no rope_scaling: plain RoPE asked to read positions it never saw")
    twice, _ = extended_config(extended_config(base, {"context_length": 64, "rope_scaling": "linear"})[0],
                               {"context_length": 128, "rope_factor": 4.0})
    assert (twice.rope_original_context, twice.rope_factor) == (32, 4.0)  # the first training length stays


def test_documents_are_counted_by_length() -> None:
    eot = 0
    tokens = np.array([5] * 10 + [eot] + [6] * 40 + [eot] + [7] * 3 + [eot], dtype=np.uint16)
    assert document_counts(tokens, eot, (8, 32, 64)) == (3, {8: 2, 32: 1, 64: 0})
