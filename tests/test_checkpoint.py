"""Checkpoint format: round trip, tied weights once, atomic writes and prunes, crash leftovers swept, refusal of
corrupt or mismatched ones (a config.json that is not the one its weights were written with included)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tinylm import checkpoint as ck
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.presets import preset_config

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


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_failed_save_leaves_previous_checkpoint_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  code: int) -> None:
    """A full disk or a read-only folder half-way through a save: one line, the previous checkpoint, no
    temporary folder holding the space the retry needs (chmod is no test here: CI runs as root)."""
    model = micro_model()
    good = save(tmp_path, 10, model)

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(TinyLMError) as err:
        save(tmp_path, 20, model)
    assert str(err.value) == f"cannot write checkpoint to {tmp_path / 'checkpoints'}: {os.strerror(code)}"
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [good.name]
    assert ck.resolve_checkpoint(tmp_path) == good
    assert save(tmp_path, 20, model) == tmp_path / "checkpoints" / "step_00000020"  # the retry succeeds


def test_full_disk_in_safetensors_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors reports a full disk as its own error type, with the OS error number inside the text."""
    import safetensors.torch
    from safetensors import SafetensorError

    def fail(*args: object, **kwargs: object) -> None:
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", fail)
    with pytest.raises(TinyLMError, match="No space left on device$"):
        save(tmp_path, 1, micro_model())
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_leftovers_of_killed_saves_and_prunes_are_swept(tmp_path: Path) -> None:
    """What a kill -9 can leave: a temporary save, a prune half-way, a re-save between its two renames
    (the previous copy under `.old-`), a step folder half-deleted by an older tinylm, down to no weights."""
    model = micro_model()
    kept = save(tmp_path, 4, model)
    interrupted = save(tmp_path, 8, model)
    (save(tmp_path, 6, model) / "config.json").unlink()  # the weights survive: left for the user to mend
    root = tmp_path / "checkpoints"
    os.replace(interrupted, root / ".old-step_00000008-4242")  # killed before the new copy was renamed in
    (root / ".tmp-step_00000012-4242").mkdir()
    (root / ".tmp-step_00000012-4242" / "model.safetensors").write_bytes(b"half")
    (root / ".trash-step_00000002-4242").mkdir()
    (root / "step_00000001").mkdir()
    (root / "step_00000001" / "train_state.pt").write_bytes(b"left over")
    assert ck.list_checkpoints(tmp_path) == [kept]  # none of it is ever taken for a checkpoint
    notes = ck.sweep_leftovers(tmp_path)
    assert len(notes) == 4 and "restored step_00000008" in notes[0]
    assert sorted(p.name for p in root.iterdir()) == ["step_00000004", "step_00000006", "step_00000008"]
    assert ck.load_train_state(root / "step_00000008") == {"step": 8}
    assert ck.sweep_leftovers(tmp_path) == []


def test_prune_killed_half_way_is_never_a_checkpoint_and_is_swept(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Pruning renames first: a process dying in the middle of deleting leaves a hidden folder, not a
    step folder without weights, and the next save removes it."""
    model = micro_model()
    save(tmp_path, 1, model)
    save(tmp_path, 2, model)

    class Killed(BaseException):
        pass

    def die_half_way(path: Path, **kwargs: object) -> None:
        (Path(path) / "model.safetensors").unlink()
        raise Killed

    monkeypatch.setattr(shutil, "rmtree", die_half_way)
    with pytest.raises(Killed):
        save(tmp_path, 3, model, keep_last=2)
    monkeypatch.undo()
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_00000002", "step_00000003"]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".trash-")]
    save(tmp_path, 4, model)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000002", "step_00000003",
                                                                           "step_00000004"]


def test_keep_last_spares_the_newest_checkpoint_with_train_state(tmp_path: Path) -> None:
    model = micro_model()
    for step in (1, 2):
        save(tmp_path, step, model, keep_last=2)
    for step in (3, 4, 5):  # weights only, as `tinylm import` or a user deleting train_state.pt leaves them
        ck.save_checkpoint(tmp_path, step, model, model.config, keep_last=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_00000002", "step_00000004", "step_00000005"]
    assert ck.newest_resumable(tmp_path) == (tmp_path / "checkpoints" / "step_00000002",
                                             [tmp_path / "checkpoints" / f"step_0000000{s}" for s in (4, 5)])


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


def test_config_json_that_does_not_match_the_weights_is_refused(tmp_path: Path) -> None:
    """Heads and RoPE base changed in config.json: every shape still fits, so only the model config bound
    into the safetensors header can tell that the model would compute something else."""
    path = save(tmp_path, 1, micro_model())
    info = json.loads((path / "config.json").read_text())
    info["model"].update(n_head=4, n_kv_head=2, rope_theta=500.0)
    (path / "config.json").write_text(json.dumps(info))
    shaped_alike = build_model(ModelConfig.from_dict(info["model"]))
    ck.full_state_dict(shaped_alike, _stored(path), path)  # every name and shape fits
    expected = (f"corrupt checkpoint {path}: config.json does not match model.safetensors (n_head: config 4, "
                "weights written with 2, n_kv_head: config 2, weights written with 1, rope_theta: config 500.0, "
                "weights written with 10000.0)")
    for load in (ck.load_model, ck.checkpoint_model_config, lambda p: ck.load_weights(shaped_alike, p)):
        with pytest.raises(TinyLMError) as err:
            load(path)
        assert str(err.value) == expected
    info["model"].update(n_head=2, n_kv_head=1, rope_theta=10000.0, gradient_checkpointing=True)
    (path / "config.json").write_text(json.dumps(info))
    ck.load_model(path)  # a compute-only field may differ


def _stored(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_checkpoints_from_before_the_binding_still_load(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    model = micro_model()
    path = save(tmp_path, 1, model)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        metadata = f.metadata()
    assert json.loads(metadata[ck.MODEL_METADATA])["n_head"] == 2
    del metadata[ck.MODEL_METADATA]
    save_file(_stored(path), str(path / "model.safetensors"), metadata=metadata)
    loaded, _, _ = ck.load_model(path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_a_missing_config_json_is_named(tmp_path: Path) -> None:
    path = save(tmp_path / "run", 3, micro_model())
    (path / "config.json").unlink()
    for given in (tmp_path / "run", path):
        with pytest.raises(TinyLMError, match=f"^corrupt checkpoint {path}: config.json is missing$"):
            ck.resolve_checkpoint(given)


def test_a_hugging_face_folder_points_to_tinylm_import(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (hf / "model.safetensors").write_bytes(b"")
    with pytest.raises(TinyLMError) as err:
        ck.load_model(hf)
    assert str(err.value) == (f"{hf} is a Hugging Face model folder, not a tinylm checkpoint: convert it with "
                              f"`tinylm import {hf} --out DIR`")


def test_files_get_ordinary_modes(tmp_path: Path) -> None:
    """safetensors >= 0.8 creates its file 0600 (a temporary file renamed into place); ours follow the umask."""
    previous = os.umask(0o022)
    try:
        tok = tmp_path / "tokenizer.json"
        tok.write_text("{}")
        path = save(tmp_path / "run", 1, micro_model(), tokenizer_file=tok)
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [path, path.parent, *path.iterdir()]}
    assert modes == {"step_00000001": 0o755, "checkpoints": 0o755, "model.safetensors": 0o644,
                     "config.json": 0o644, "tokenizer.json": 0o644, "train_state.pt": 0o644}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_config_keeps_every_key_and_updates_atomically(tmp_path: Path) -> None:
    lineage = {"stage": "sft", "parent": "runs/base/checkpoints/step_00000100", "data": "tasks:arithmetic"}
    path = save(tmp_path, 7, micro_model(), meta={"lineage": lineage, "stage": "sft"})
    info = ck.update_checkpoint_config(path, chat_template="{{ messages }}")
    assert ck.read_checkpoint_config(path) == info
    assert info["lineage"] == lineage and info["stage"] == "sft" and info["chat_template"] == "{{ messages }}"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors", "train_state.pt"]
    assert stat.S_IMODE((path / "config.json").stat().st_mode) == 0o666 & ~current_umask()
    with pytest.raises(TinyLMError, match="bound to its weights"):
        ck.update_checkpoint_config(path, model={"n_head": 4})
    ck.load_model(path)  # still matches the weights
