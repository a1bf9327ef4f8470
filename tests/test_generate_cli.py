"""`tinylm generate` end to end on a checkpoint in the training format (tiny random model + small BPE)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinylm.checkpoint import save_checkpoint
from tinylm.cli.main import main
from tinylm.config import ModelConfig
from tinylm.inference.engine import Engine
from tinylm.inference.sampling import GREEDY
from tinylm.models.factory import build_model
from tinylm.tokenizer import train_bpe

CORPUS = ["def add(a, b):\n    return a + b\n", "class Point:\n    x: int = 0\n", "print('héllo wörld')\n"] * 30


def make_run(root: Path, arch: str = "modern", context_length: int = 48, seed: int = 0, name: str = "run") -> Path:
    """A run folder with one checkpoint: what `tinylm train` leaves behind, but random and tiny."""
    tokenizer = train_bpe(CORPUS, vocab_size=320)
    tokenizer_file = tokenizer.save(root / f"{name}-tokenizer.json")
    extra = dict(n_kv_head=2) if arch == "modern" else dict(tie_embeddings=False)
    config = ModelConfig(arch=arch, vocab_size=tokenizer.vocab_size, context_length=context_length, n_embed=32,
                         n_head=4, n_blocks=2, init_std=0.3, **extra)
    torch.manual_seed(seed)
    model = build_model(config)
    run_dir = root / name
    save_checkpoint(run_dir, 5, model, config, tokenizer_file=tokenizer_file)
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("generate"))


def _generate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["generate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_greedy_output_is_prompt_plus_the_engines_continuation(run_dir: Path, capsys) -> None:
    code, out, err = _generate(capsys, "--checkpoint", str(run_dir), "--prompt", "def add(", "--temperature", "0",
                               "--max-new-tokens", "30")
    assert code == 0, err
    from tinylm.checkpoint import load_model

    model, tokenizer, _ = load_model(run_dir)
    ids = Engine(model).generate([tokenizer.encode("def add(")], 30, GREEDY, stop_ids=[tokenizer.eot_id])[0]
    assert out == "def add(" + tokenizer.decode(ids) + "\n"
    assert "tokens/s" in err and "step 5" in err
    assert "tinylm: fp32 weights: " in err  # the decode precision and its reason (a small model stays fp32)


def test_checkpoint_folder_samples_seeds_and_options(run_dir: Path, capsys, tmp_path: Path) -> None:
    checkpoint = next((run_dir / "checkpoints").iterdir())
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("class Point", encoding="utf-8")
    args = ["--checkpoint", str(checkpoint), "--prompt-file", str(prompt_file), "--max-new-tokens", "12",
            "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01", "--repetition-penalty", "1.2",
            "--num-samples", "2", "--seed", "3", "--int8"]
    code, out, err = _generate(capsys, *args)
    assert code == 0, err
    assert out.count("--- sample") == 2 and out.count("class Point") == 2
    assert _generate(capsys, *args)[1] == out  # seeded: the same text again
    assert "int8" in err and "tinylm: int8 weights, fp32 activations: " in err


def test_speculative_draft_gives_the_greedy_target_text(run_dir: Path, capsys, tmp_path: Path) -> None:
    draft = make_run(tmp_path, seed=1, name="draft")
    common = ["--checkpoint", str(run_dir), "--prompt", "x", "--temperature", "0", "--max-new-tokens", "60"]
    plain = _generate(capsys, *common)
    # the draft has its own BPE trained on the same text: identical vocabulary, so it can propose tokens
    code, out, err = _generate(capsys, *common, "--draft", str(draft))
    assert code == 0, err
    assert out == plain[1] and "acceptance" in err
    for k in ("1", "7"):  # any number of draft tokens per round: the same text
        code, out, err = _generate(capsys, *common, "--draft", str(draft), "--draft-tokens", k)
        assert code == 0 and out == plain[1], err


def test_draft_tokens_without_a_draft_or_out_of_range_is_one_line(run_dir: Path, capsys) -> None:
    common = ["--checkpoint", str(run_dir), "--prompt", "x", "--max-new-tokens", "5"]
    code, _, err = _generate(capsys, *common, "--draft-tokens", "3")
    assert code != 0 and "--draft-tokens needs --draft" in err and "Traceback" not in err
    code, _, err = _generate(capsys, *common, "--draft", str(run_dir), "--draft-tokens", "0")
    assert code == 2 and "--draft-tokens" in err and "Traceback" not in err


def test_empty_prompt_starts_from_eot_and_long_prompts_are_cut_with_a_notice(run_dir: Path, capsys) -> None:
    code, out, err = _generate(capsys, "--checkpoint", str(run_dir), "--max-new-tokens", "5", "--temperature", "0")
    assert code == 0, err
    long_prompt = "def add(a, b): return a + b\n" * 20
    code, out, err = _generate(capsys, "--checkpoint", str(run_dir), "--prompt", long_prompt, "--max-new-tokens", "5")
    assert code == 0 and "keeping the last 47" in err
    assert out.startswith(long_prompt)


def test_a_new_document_is_never_empty(tmp_path: Path, capsys) -> None:
    """Without a prompt the sample starts after end-of-text, and end-of-text cannot come first, though this model
    writes it after any token 95% of the time (as a trained one often does after end-of-text): no seed prints
    nothing, with or without a draft."""
    from chat_stop_support import chat_checkpoint

    run, _ = chat_checkpoint(tmp_path, chain_of=lambda t: [t.eot_id], weight=1.5)
    for seed in range(6):
        for extra in ([], ["--draft", str(run)]):
            code, out, err = _generate(capsys, "--checkpoint", str(run), "--seed", str(seed), *extra)
            assert code == 0, err
            assert out != "\n" and "tinylm: 0 tokens" not in err, (seed, extra, err)
            assert _generate(capsys, "--checkpoint", str(run), "--seed", str(seed), *extra)[1] == out  # reproducible
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "a new document, never empty" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("args", "message"), [
    (["--checkpoint", "{missing}"], "checkpoint not found"),
    (["--checkpoint", "{corrupt}"], "corrupt checkpoint"),
    (["--checkpoint", "{run}", "--temperature", "-1"], "temperature must be >= 0"),
    (["--checkpoint", "{run}", "--top-p", "0"], "top_p must be in (0, 1]"),
    (["--checkpoint", "{run}", "--top-k", "0"], "argument --top-k: must be an integer in [1, "),
    (["--checkpoint", "{run}", "--prompt-file", "{missing}"], "prompt file not found"),
])
def test_user_mistakes_are_one_clear_line(args: list[str], message: str, run_dir: Path, tmp_path: Path,
                                          capsys) -> None:
    corrupt = make_run(tmp_path, name="corrupt")
    weights = next((corrupt / "checkpoints").iterdir()) / "model.safetensors"
    weights.write_bytes(b"not a safetensors file")
    paths = dict(missing=str(tmp_path / "nope"), corrupt=str(corrupt), run=str(run_dir))
    code, out, err = _generate(capsys, *[a.format(**paths) for a in args])
    assert code == (2 if "argument --" in message else 1) and out == ""  # 2: argparse refused it, as usual
    assert err.startswith("tinylm: error: ") and message in err and len(err.strip().splitlines()) == 1



def test_a_draft_with_another_tokenizer_is_refused_in_one_line(run_dir: Path, tmp_path: Path, capsys) -> None:
    """Same vocabulary size, other merges: the ids mean other text, so the draft's guesses would be nonsense."""
    other = train_bpe(["SELECT name FROM users WHERE id = 1;\n", "<p>hello</p>\n"] * 40, vocab_size=320)
    config = ModelConfig(vocab_size=other.vocab_size, context_length=48, n_embed=32, n_head=4, n_blocks=2)
    draft = tmp_path / "draft"
    save_checkpoint(draft, 1, build_model(config), config, tokenizer_file=other.save(tmp_path / "other.json"))
    code, out, err = _generate(capsys, "--checkpoint", str(run_dir), "--draft", str(draft), "--prompt", "x")
    assert code == 1 and out == ""
    assert "another tokenizer" in err and len(err.strip().splitlines()) == 1


def test_threads_sets_torchs_threads_before_decoding(run_dir: Path, capsys, monkeypatch, one_thread) -> None:
    asked = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: asked.append(n))
    code, _, err = _generate(capsys, "--checkpoint", str(run_dir), "--max-new-tokens", "2", "--threads", "3")
    assert code == 0, err
    assert asked == [3]
    code, _, err = _generate(capsys, "--checkpoint", str(run_dir), "--max-new-tokens", "2")
    assert code == 0 and asked == [3]  # without --threads torch keeps its own choice


def test_sampling_options_are_refused_before_the_checkpoint_is_read(tmp_path: Path, capsys) -> None:
    for args in (["--temperature", "nan"], ["--temperature", "inf"], ["--top-p", "nan"]):
        code, out, err = _generate(capsys, "--checkpoint", str(tmp_path / "absent"), *args)
        assert code == 1 and "checkpoint not found" not in err and len(err.strip().splitlines()) == 1
