"""`tinylm train --extend`: a trained checkpoint continues at a longer context with a RoPE scaling rule, its
weights exactly where the base left them, and every way to ask for it wrongly is one line."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from test_train_support import MICRO, config, losses
from tinylm.checkpoint import checkpoint_model_config, list_checkpoints, load_model, read_weights
from tinylm.cli.main import main
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.models.factory import build_model
from tinylm.stages.pretrain import pretrain
from tinylm.stages.pretrain.extend import extended_config

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
    assert "sequence warmup: none (a context extension learns from its long rows from the first step" in said
    assert re.search(r"documents: of \d+ train documents, \d+ hold a 32-token row and \d+ a 128-token row; a row "
                     r"crosses document boundaries where they are shorter \(--long-documents keeps it in one\)", said)
    mcfg = checkpoint_model_config(list_checkpoints(out)[-1])
    assert (mcfg.context_length, mcfg.rope_scaling, mcfg.rope_factor, mcfg.rope_original_context) == (
        128, "yarn", 4.0, 32)
    assert {k: getattr(mcfg, k) for k in MICRO if k != "context_length"} == {
        k: v for k, v in MICRO.items() if k != "context_length"}
    assert summary.steps == 2 and len(losses(out)) == 2


def test_an_extension_resumes_with_its_own_optimizer(base_run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out, extension = tmp_path / "long", {"context_length": 64, "rope_scaling": "linear"}
    pretrain(config(out, extend=str(base_run), seq_len=64, max_steps=1, checkpoint_every=1, overrides=extension))
    capsys.readouterr()
    summary = pretrain(config(out, extend=str(base_run), seq_len=64, max_steps=2, resume="latest",
                              overrides=extension))
    said = capsys.readouterr().err
    assert "linear x2, resumed from" in said and "(its weights and optimizer)" in said and "fresh optimizer" not in said
    assert summary.steps == 2 and len(losses(out)) == 2


def test_long_documents_draws_every_row_from_one_document(base_run: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    pretrain(config(tmp_path / "long", extend=str(base_run), seq_len=64, max_steps=1, long_documents=True,
                    overrides={"context_length": 64, "rope_scaling": "linear"}))
    said = capsys.readouterr().err
    assert re.search(r"\d+ a 64-token row; rows are drawn from those alone \(--long-documents\)", said)
    with pytest.raises(TinyLMError, match=r"--long-documents: no document of .*train.bin holds a row of 30001 "
                                          r"tokens \(the longest has \d+\)"):  # though the split holds more
        pretrain(config(tmp_path / "none", extend=str(base_run), seq_len=30_000, max_steps=1, long_documents=True,
                        overrides={"context_length": 30_000, "rope_scaling": "linear"}))


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
    assert extended.rope_original_context == 32  # trained at 32 first: where position evaluations cut
    assert notes[0].startswith("no rope_scaling: plain RoPE asked to read positions it never saw")
    twice, _ = extended_config(extended_config(base, {"context_length": 64, "rope_scaling": "linear"})[0],
                               {"context_length": 128, "rope_factor": 4.0})
    assert (twice.rope_original_context, twice.rope_factor) == (32, 4.0)  # the first training length stays


def test_a_raised_base_is_plain_rope_on_a_new_theta_and_says_so() -> None:
    """Code Llama's adjusted base frequency: --extend may change rope_theta, and the model's tables use it."""
    base = ModelConfig(vocab_size=97, context_length=32, n_embed=32, n_head=2)
    extended, notes = extended_config(base, {"context_length": 128, "rope_theta": 1_000_000.0})
    assert (extended.rope_scaling, extended.rope_theta, extended.rope_original_context) == ("none", 1e6, 32)
    assert notes == ["rope_theta 10000 -> 1e+06: plain RoPE on a raised base (Code Llama's adjusted base frequency)"]
    rope = build_model(extended).rope
    half = torch.arange(0, 16, 2, dtype=torch.float64) / 16
    np.testing.assert_allclose(rope.inv_freq.double().numpy(), (1e6 ** -half).numpy(), rtol=1e-6)


def test_documents_are_counted_by_the_rows_they_hold() -> None:
    from tinylm.data.document_windows import DocumentWindows

    eot = 0
    tokens = np.array([5] * 10 + [eot] + [6] * 40 + [eot] + [7] * 3 + [eot] + [8] * 5, dtype=np.uint16)
    documents = DocumentWindows(tokens, eot)
    assert documents.lengths.tolist() == [11, 41, 4, 5]  # each with its end-of-text; the last has none
    assert documents.starts.tolist() == [0, 11, 52, 56]
    assert [documents.longer_than(n) for n in (4, 10, 11, 40, 41)] == [3, 2, 1, 1, 0]
    import tinylm.data.document_windows as document_windows

    document_windows.CHUNK, chunk = 7, document_windows.CHUNK  # found in chunks, the same spans
    try:
        assert DocumentWindows(tokens, eot).lengths.tolist() == [11, 41, 4, 5]
    finally:
        document_windows.CHUNK = chunk


def six_documents() -> tuple[int, list[int], np.ndarray]:
    """End-of-text 0, and six documents of these lengths (each counting its end-of-text) of random tokens."""
    eot, rng = 0, np.random.default_rng(0)
    lengths = [3, 30, 9, 17, 50, 8]
    tokens = np.concatenate([np.append(rng.integers(1, 99, n - 1), eot) for n in lengths]).astype(np.uint16)
    return eot, lengths, tokens


def test_long_document_rows_are_each_inside_one_document_and_cover_every_start() -> None:
    from tinylm.data.document_windows import DocumentWindows
    from tinylm.data.loader import BatchLoader

    eot, lengths, tokens = six_documents()
    documents = DocumentWindows(tokens, eot)
    starts = documents.sample(np.random.default_rng(1), 20_000, seq_len=8)
    valid = {int(s) + k for s, n in zip(documents.starts, lengths) for k in range(n - 8)}  # n - 8 starts each
    assert set(starts.tolist()) == valid  # every window that fits, and no other
    counts = np.bincount(starts, minlength=len(tokens))[sorted(valid)]
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()  # uniform over windows
    loader = BatchLoader(tokens, 64, 8, seed=3, long_documents_eot=eot)
    x, y = loader.next_batch()
    assert not (x == eot).any() and ((y[:, :-1] == eot).sum() == 0)  # an end-of-text only as the last target
    assert (BatchLoader(tokens, 64, 8, seed=3, long_documents_eot=eot).next_batch()[0] == x).all()  # seeded
    with pytest.raises(TinyLMError, match=r"--long-documents: no document of token array holds a row of 51 "
                                          r"tokens \(the longest has 50\)"):
        BatchLoader(tokens, 4, 50, long_documents_eot=eot)
    tiles = documents.tiles(8)
    assert tiles.tolist() == [3, 11, 19, 33, 42, 50, 59, 67, 75, 83, 91, 99]  # from each start, (n - 1) // 8 of them
    assert all(not (tokens[t:t + 8] == eot).any() for t in tiles)


def test_document_end_rows_are_each_a_long_documents_last_window_the_documents_drawn_uniformly() -> None:
    """A passkey document asks at its end: with --document-ends every row ends where a document does."""
    from tinylm.data.document_windows import DocumentWindows
    from tinylm.data.loader import BatchLoader

    eot, lengths, tokens = six_documents()
    documents = DocumentWindows(tokens, eot)
    starts = documents.sample_ends(np.random.default_rng(1), 9_000, seq_len=8)
    ends = {int(s) + n - 9 for s, n in zip(documents.starts, lengths) if n > 8}  # one window each, at its end
    assert set(starts.tolist()) == ends == {24, 33, 50, 100}
    counts = np.bincount(starts)[sorted(ends)]
    assert counts.min() > 0.9 * counts.mean() and counts.max() < 1.1 * counts.mean()  # uniform over documents
    loader = BatchLoader(tokens, 64, 8, seed=3, long_documents_eot=eot, document_ends=True)
    x, y = loader.next_batch()
    assert (y[:, -1] == eot).all() and not (x == eot).any()  # each row's last target its document's end
    with pytest.raises(TinyLMError, match="--document-ends .* needs --long-documents"):
        BatchLoader(tokens, 4, 8, document_ends=True)
    with pytest.raises(TinyLMError, match="no document holds a window of 51 tokens"):
        documents.sample_ends(np.random.default_rng(1), 4, seq_len=50)


def test_document_ends_without_long_documents_is_refused_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(TinyLMError, match="--document-ends .* needs --long-documents"):
        config(tmp_path / "run", max_steps=1, document_ends=True).validate()

# ---- the evaluations that need the length ----------------------------------------------------------------
def test_a_passkey_prompt_is_the_length_asked_with_the_key_at_its_depth(base_run: Path) -> None:
    from tinylm.evaluate.long_context import QUESTION, passkey_prompt
    from tinylm.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(Path(config(None).data) / "tokenizer.json")
    needle = tokenizer.encode("The pass key is 48213. Remember it. 48213 is the pass key. ")
    room = 400 - len(needle) - len(tokenizer.encode(QUESTION))
    for depth in (0.0, 0.5, 1.0):
        ids = passkey_prompt(tokenizer, 400, depth, 48213)
        text = tokenizer.decode(ids)
        assert len(ids) == 400 and text.endswith(QUESTION) and text.count("48213") == 2
        before = round(depth * room)  # filler tokens ahead of the key
        assert ids[before:before + len(needle)] == needle
    with pytest.raises(TinyLMError, match="passkey:20 is too short"):
        passkey_prompt(tokenizer, 20, 0.5, 48213)


def test_a_passkey_answer_is_the_first_number_and_only_the_key() -> None:
    from tinylm.evaluate.long_context import answered

    assert answered(" 70913.", 70913) and answered("70913 is the pass key", 70913) and answered(" 70913", 70913)
    assert not answered(" 7091313.", 70913) and not answered(" 7091", 70913) and not answered(" a 70913", 70913)
    assert not answered("", 70913) and not answered(" 12345. 70913", 70913)


def test_passkey_scores_each_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that finds the key only in the second half of the text scores 1 at depths 0.5-1, 0 before."""
    from tinylm.evaluate import long_context
    from tinylm.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(Path(config(None).data) / "tokenizer.json")

    def reader(model, tok, ids, new_tokens):
        text = tok.decode(ids[0].tolist())
        key = text.split("The pass key is ")[1][:5]
        return f" {key}." if text.index(key) >= len(text) * 0.3 else " 00000"

    monkeypatch.setattr(long_context, "greedy_text", reader)
    model = torch.nn.Linear(1, 1)
    model.config = ModelConfig(vocab_size=300, context_length=512, n_embed=32, n_head=2)
    scores = long_context.passkey_accuracy(model, tokenizer, 300, trials=4)
    assert scores == {"passkey@0": 0.0, "passkey@0.25": 0.0, "passkey@0.5": 1.0, "passkey@0.75": 1.0,
                      "passkey@1": 1.0, "passkey": 0.6}


def test_bits_per_byte_by_position_adds_up_to_the_whole(base_run: Path) -> None:
    """Byte-weighted, the buckets give back the bits per byte of all positions, computed here independently
    over windows that each lie inside one dev document."""
    from tinylm.checkpoint import load_model
    from tinylm.evaluate.long_context import bpb_by_position, position_buckets

    assert position_buckets(1024, 256) == [(0, 128), (128, 256), (256, 512), (512, 1024)]
    assert position_buckets(64, 64) == [(0, 8), (8, 16), (16, 32), (32, 64)]
    model, tokenizer, _ = load_model(base_run)
    data = Path(config(None).data)
    buckets = bpb_by_position(model, tokenizer, data, 64, batch_size=4, max_batches=2)
    assert list(buckets) == ["bpb@0-8", "bpb@8-16", "bpb@16-32", "bpb@32-64", "bpb@0-32"]
    dev = np.fromfile(data / "dev.bin", dtype=np.uint16).astype(np.int64)
    eot = json.loads((data / "dev.json").read_text())["eot_id"]
    starts, begin = [], 0  # windows of 64 + 1 tokens from each document's start, none crossing its end
    for end in [int(e) for e in np.flatnonzero(dev == eot)] + ([len(dev) - 1] if dev[-1] != eot else []):
        starts += [begin + 64 * k for k in range((end - begin) // 64)]
        begin = end + 1
    assert len(starts) >= 8
    x = torch.tensor(np.stack([dev[s:s + 64] for s in starts[:8]]))
    y = torch.tensor(np.stack([dev[s + 1:s + 65] for s in starts[:8]]))
    assert not (x == eot).any()
    with torch.no_grad():
        nats = torch.nn.functional.cross_entropy(model(x)[0].transpose(1, 2), y, reduction="none")
    sizes = np.array([len(tokenizer.token_bytes(i)) for i in range(tokenizer.n_vocab)])[y.numpy()]
    for (start, end), value in zip([*position_buckets(64, 32), (0, 32)], buckets.values(), strict=True):
        expected = nats[:, start:end].sum().item() / math.log(2) / sizes[:, start:end].sum()
        assert value == pytest.approx(expected, rel=1e-6)


def test_eval_reads_passkey_and_position_buckets_past_the_window(base_run: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "long"
    pretrain(config(out, extend=str(base_run), seq_len=64, max_steps=1,
                    overrides={"context_length": 64, "rope_scaling": "yarn"}))
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), "--tasks", "passkey:400,bpb_positions:128", "--examples", "5",
                 "--batch-size", "2", "--bpb-batches", "1", "--json", "--no-record"]) == 0
    text = json.dumps(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    for key in ("passkey@0.5", "\"passkey\"", "bpb@32-64", "bpb@64-128"):
        assert key in text, key
    assert main(["eval", "--checkpoint", str(base_run), "--tasks", "passkey:12x"]) != 0
    assert "the length after ':' must be a whole number" in capsys.readouterr().err


def test_the_first_tokens_diagnostic_moves_the_needle_in_and_keeps_the_length_and_keys(
        base_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/passkey_first_tokens.py: at shift S the depth-0 prompt has S filler tokens before the needle,
    the same length, and the same keys as at every other shift."""
    import runpy
    import sys

    from tinylm.data.passkey_words import FILLER, NEEDLE
    from tinylm.evaluate import long_context

    prompts: list[list[int]] = []
    real = long_context.greedy_text

    def spy(model, tokenizer, ids, new_tokens):  # type: ignore[no-untyped-def]
        prompts.append(ids[0].tolist())
        return real(model, tokenizer, ids, new_tokens)

    monkeypatch.setattr(long_context, "greedy_text", spy)
    script = Path(__file__).parent.parent / "benchmarks" / "passkey_first_tokens.py"
    monkeypatch.setattr(sys, "argv", [str(script), str(base_run), "--shifts", "0", "7", "--keys", "2",
                                      "--length", "256"])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    report = json.loads(capsys.readouterr().out)
    assert set(report["accuracy_by_shift"]) == {"0", "7"} and report["keys"] == 2
    _, tokenizer, _ = load_model(base_run)
    filler = tokenizer.encode(FILLER)
    assert [len(p) for p in prompts] == [len(prompts[0])] * 4 and abs(len(prompts[0]) - 256) <= len(filler)
    for at_zero, shifted in zip(prompts[:2], prompts[2:]):
        assert shifted[:7] == filler[:7]
        key = int(tokenizer.decode(at_zero).split("The pass key is ")[1][:5])  # the same key at both shifts
        assert tokenizer.decode(at_zero).startswith(NEEDLE.format(key=key)[:20])
        assert tokenizer.decode(shifted[7:]).startswith(NEEDLE.format(key=key)[:20])
