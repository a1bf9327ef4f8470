"""Checkpoint format: round trip, tied weights once, atomic writes, refusal of corrupt or mismatched ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config
from tinylm.train import checkpoint as ck

pytestmark = pytest.mark.usefixtures("one_thread")


class Sneaky:
    """An arbitrary class: unpickling one could run code, so a checkpoint holding it must be refused."""


def micro_config(arch: str = "modern", **kw: object) -> ModelConfig:
    base: dict[str, object] = dict(vocab_size=64, context_length=16, n_embed=32, n_head=2, n_blocks=1)
    if arch == "modern":
        base["n_kv_head"] = 1
    base.update(kw)
    return preset_config("tiny", arch, **base)


def micro_model(arch: str = "modern", seed: int = 0, **kw: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(micro_config(arch, **kw))


def save(run: Path, step: int, model: torch.nn.Module, **kw: object) -> Path:
    return ck.save_checkpoint(run, step, model, model.config, train_state={"step": step}, **kw)


@pytest.mark.parametrize("arch", ["modern", "classic"])
def test_round_trip_is_exact(tmp_path: Path, arch: str) -> None:
    model = micro_model(arch)
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    path = save(tmp_path / "run", 20, model, tokenizer_file=tok, meta={"tokens": 640})
    assert path == tmp_path / "run" / "checkpoints" / "step_00000020"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                      "train_state.pt"]
    info = json.loads((path / "config.json").read_text())
    assert info["step"] == 20 and info["tokens"] == 640
    assert ModelConfig.from_dict(info["model"]) == model.config
    other = micro_model(arch, seed=1)
    ck.load_weights(other, path)
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), name
    x = torch.randint(0, 64, (2, 16))
    assert torch.equal(model.eval()(x)[0], other.eval()(x)[0])


def test_tied_weights_are_stored_once_and_stay_tied(tmp_path: Path) -> None:
    model = micro_model("modern")
    assert model.lm_head.weight is model.token_embed.weight
    path = save(tmp_path, 1, model)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "token_embed.weight" in keys and "lm_head.weight" not in keys
    loaded, tokenizer, meta = ck.load_model(tmp_path)
    assert loaded.lm_head.weight is loaded.token_embed.weight
    assert not loaded.training and tokenizer is None and meta["path"] == str(path) and meta["step"] == 1


def test_train_state_is_weights_only(tmp_path: Path) -> None:
    path = save(tmp_path, 3, micro_model())
    assert ck.load_train_state(path) == {"step": 3}
    torch.save({"step": 3, "payload": Sneaky()}, path / "train_state.pt")
    with pytest.raises(TinyLMError, match="corrupt checkpoint .*train_state.pt"):
        ck.load_train_state(path)


def test_resolve_run_folder_checkpoint_folder_and_errors(tmp_path: Path) -> None:
    model = micro_model()
    run = tmp_path / "run"
    first = save(run, 5, model)
    second = save(run, 10, model)
    assert ck.resolve_checkpoint(run) == second
    assert ck.resolve_checkpoint(run / "checkpoints") == second
    assert ck.resolve_checkpoint(first) == first
    with pytest.raises(TinyLMError, match="not found"):
        ck.resolve_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TinyLMError, match="no checkpoint"):
        ck.resolve_checkpoint(tmp_path / "empty")


def test_step_names_sort_numerically(tmp_path: Path) -> None:
    model = micro_model()
    for step in (9, 100, 20):
        save(tmp_path, step, model)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_00000009", "step_00000020", "step_00000100"]


def test_crash_mid_save_leaves_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = micro_model()
    good = save(tmp_path, 10, model)

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ck.torch, "save", crash)
    with pytest.raises(OSError):
        save(tmp_path, 20, model)
    monkeypatch.undo()
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")]
    assert leftovers, "the half-written checkpoint should sit under a temporary name"
    assert not (tmp_path / "checkpoints" / "step_00000020").exists()
    assert ck.list_checkpoints(tmp_path) == [good]
    assert ck.resolve_checkpoint(tmp_path) == good
    save(tmp_path, 30, model)  # the next save sweeps the leftover
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_resaving_a_step_replaces_it_and_keep_last(tmp_path: Path) -> None:
    model = micro_model()
    save(tmp_path, 4, model, meta={"tag": "a"})
    save(tmp_path, 4, model, meta={"tag": "b"})
    assert ck.read_checkpoint_config(ck.resolve_checkpoint(tmp_path))["tag"] == "b"
    for step in (8, 12, 16):
        save(tmp_path, step, model, keep_last=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_00000012", "step_00000016"]


def test_corrupt_files_are_refused_with_one_line(tmp_path: Path) -> None:
    model = micro_model()
    path = save(tmp_path, 1, model)
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # truncated, as by a full disk
    with pytest.raises(TinyLMError, match="corrupt checkpoint .*model.safetensors") as err:
        ck.load_weights(micro_model(), path)
    assert "\n" not in str(err.value)
    (path / "config.json").write_text("{not json")
    with pytest.raises(TinyLMError, match="corrupt checkpoint .*config.json"):
        ck.resolve_checkpoint(path)
    (path / "config.json").write_text(json.dumps({"step": 1}))
    with pytest.raises(TinyLMError, match="no 'model'"):
        ck.resolve_checkpoint(path)
    (path / "train_state.pt").write_bytes(b"\x00garbage")
    with pytest.raises(TinyLMError, match="train_state.pt"):
        ck.load_train_state(path)
    (path / "config.json").unlink()
    with pytest.raises(TinyLMError, match="config.json is missing"):
        ck.resolve_checkpoint(path)


def test_weights_of_another_shape_are_refused(tmp_path: Path) -> None:
    path = save(tmp_path, 1, micro_model(n_embed=32))
    with pytest.raises(TinyLMError, match="shape"):
        ck.load_weights(micro_model(n_embed=64), path)
    with pytest.raises(TinyLMError, match="missing"):
        ck.load_weights(micro_model(n_blocks=2), path)


def test_mismatched_config_names_every_differing_field(tmp_path: Path) -> None:
    path = save(tmp_path, 1, micro_model())
    saved = ck.checkpoint_model_config(path)
    with pytest.raises(TinyLMError) as err:
        ck.check_same_model(saved, micro_config(n_blocks=2, n_kv_head=2), path)
    message = str(err.value)
    assert "n_blocks (checkpoint 1, requested 2)" in message and "n_kv_head (checkpoint 1, requested 2)" in message
    assert "n_embed" not in message
    ck.check_same_model(saved, micro_config(gradient_checkpointing=True), path)  # compute-only: allowed
