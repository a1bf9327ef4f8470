"""`tinylm inspect`: the identities every view rests on, on every model variant, and the command itself.

- the logit lens after the last block is the model's own logits;
- direct logit attribution's parts add up to the logit (and to a logit difference);
- patching the whole clean residual stream restores the clean metric exactly, patching nothing leaves
  the corrupted one, and a grid's last layer at the last position is exactly 1;
- attention rows are probabilities that never look ahead;
- the scores name the heads they are built to find;
- bad input is one line: prompts of different lengths, a layer out of range, a target of two tokens, a
  reward model.

References we did not write (transformers, nnsight, NumPy) are in tests/test_inspect_references.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from model_variants import all_configs
from test_train_support import MICRO, data_dir
from tinylm.checkpoint import list_checkpoints, read_checkpoint_config
from tinylm.checkpoint.layout import SNAPSHOTS
from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.interpret.attention import attention_patterns, head_scores
from tinylm.interpret.attribution import logit_attribution
from tinylm.interpret.induction import induction_curve, induction_scores, repeated_sequence_score
from tinylm.interpret.lens import lens_logits, logit_lens
from tinylm.interpret.loading import Inspected, load_for_inspection
from tinylm.interpret.neurons import embedding_neighbours, top_activations
from tinylm.interpret.patching import activation_patching, metric_of
from tinylm.models.factory import build_model
from tinylm.models.hooks.patching import patched
from tinylm.models.hooks.residual import record_residual
from tinylm.tokenizer.chat_format import ChatFormat

pytestmark = pytest.mark.usefixtures("one_thread")
VARIANTS = all_configs()


class NumberLabels:
    n_vocab = 97
    eot_id = 0

    def token_bytes(self, token_id: int) -> bytes:
        return str(token_id).encode()


def inspected_variant(name: str, seed: int = 0) -> Inspected:
    torch.manual_seed(seed)
    model = build_model(VARIANTS[name]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    for module in model.modules():
        if hasattr(module, "impl"):
            module.impl = "sdpa"
    return Inspected(model, NumberLabels(), {"path": "."})


def prompt(seed: int, length: int = 12) -> list[int]:
    return torch.randint(1, 97, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_lens_after_the_last_block_is_the_models_logits(name: str) -> None:
    inspected = inspected_variant(name)
    ids = prompt(1)
    with torch.no_grad():
        logits = inspected.model(torch.tensor([ids]))[0][0]
    lens = lens_logits(inspected, ids)
    assert lens.shape == (inspected.model.config.n_blocks, len(ids), 97)
    assert torch.allclose(lens[-1], logits, atol=1e-6, rtol=0)
    view = logit_lens(inspected, ids, top_k=3, target=ids[0])
    assert view["lens"][-1][-1]["ids"] == logits[-1].topk(3).indices.tolist()
    assert view["target"]["rank"][-1][-1] == int((logits[-1] > logits[-1, ids[0]]).sum())


@pytest.mark.parametrize("name", list(VARIANTS))
def test_attributions_sum_to_the_logit(name: str) -> None:
    inspected = inspected_variant(name, seed=2)
    ids = prompt(3)
    for versus in (None, 11):
        result = logit_attribution(inspected, ids, target=7, versus=versus)
        assert result["residual_error"] < 1e-5
        assert sum(part["value"] for part in result["parts"]) == pytest.approx(result["sum"], abs=1e-9)
        config = inspected.model.config
        n_heads = sum(part["name"].startswith("L") and "H" in part["name"] for part in result["parts"])
        assert n_heads == config.n_blocks * config.n_head
    with torch.no_grad():
        logits = inspected.model.lm_head(inspected.model.forward_hidden(torch.tensor([ids])))[0, -1]
    assert logit_attribution(inspected, ids, 7)["logit"] == pytest.approx(float(logits[7]), abs=1e-5)
    assert logit_attribution(inspected, ids)["target"]["id"] == int(logits.argmax())  # default: the top guess


@pytest.mark.parametrize("name", list(VARIANTS))
def test_patching_everything_restores_the_clean_run_and_nothing_leaves_the_corrupted_one(name: str) -> None:
    inspected = inspected_variant(name, seed=4)
    model = inspected.model
    clean = prompt(5)
    corrupt = list(clean)
    corrupt[3] = (corrupt[3] + 5) % 97
    with torch.no_grad(), record_residual(model) as stream:
        clean_logits = model(torch.tensor([clean]))[0]
    with torch.no_grad():
        corrupt_logits = model(torch.tensor([corrupt]))[0]
    T = len(clean)
    for layer in (0, model.config.n_blocks):
        with torch.no_grad(), patched(model, "residual", layer, torch.ones(1, T, dtype=torch.bool), stream[layer]):
            assert torch.equal(model(torch.tensor([corrupt]))[0], clean_logits)
        with torch.no_grad(), patched(model, "residual", layer, torch.zeros(1, T, dtype=torch.bool), stream[layer]):
            assert torch.equal(model(torch.tensor([corrupt]))[0], corrupt_logits)
    result = activation_patching(inspected, clean, corrupt, "logit_diff", 3, 5)
    assert result["residual"][-1][-1] == pytest.approx(1.0, abs=1e-6)  # the last position after the last block
    assert result["residual"][-1][:-1] == pytest.approx([0.0] * (T - 1), abs=1e-6)
    assert result["residual"][0][:3] == pytest.approx([0.0] * 3, abs=1e-6)  # the same tokens in both prompts
    assert result["metric"]["clean"] == pytest.approx(float(metric_of(clean_logits, "logit_diff", 3, 5)[0]))
    assert len(result["heads"]) == model.config.n_blocks and len(result["heads"][0]) == model.config.n_head
    logprob = activation_patching(inspected, clean, corrupt, "logprob", 3)
    assert logprob["residual"][-1][-1] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("name", ["gqa", "window", "mla", "classic"])
def test_attention_rows_are_probabilities_that_never_look_ahead(name: str) -> None:
    inspected = inspected_variant(name)
    patterns = attention_patterns(inspected, prompt(6, 10))
    assert torch.allclose(patterns.sum(-1), torch.ones(patterns.shape[:-1]), atol=1e-6)
    assert patterns.triu(1).abs().max() == 0.0


def test_scores_recognise_the_heads_they_are_built_to_find() -> None:
    T = 8
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    first = torch.zeros(T, T)
    first[:, 0] = 1.0
    ids = [5, 6, 7, 8, 5, 6, 7, 8]
    induction = torch.zeros(T, T)
    for q in range(T):  # attend to the token after the earlier occurrence of q's token, else to itself
        induction[q, q - 3 if q >= 4 else q] = 1.0
    scores = head_scores(torch.stack([previous, first, induction])[None], ids)
    # query 1's previous token is the first token: it counts for both scores
    assert scores["previous_token"][0].tolist() == pytest.approx([1.0, 1 / 7, 0.0])
    assert scores["first_token"][0].tolist() == pytest.approx([1 / 7, 1.0, 0.0])
    assert scores["induction"][0].tolist() == pytest.approx([0.0, 0.0, 1.0])
    assert scores["entropy"][0].tolist() == pytest.approx([0.0, 0.0, 0.0])


def test_the_induction_score_is_one_for_a_head_that_attends_after_the_earlier_copy() -> None:
    n = 6
    induction, previous = torch.zeros(2 * n, 2 * n), torch.zeros(2 * n, 2 * n)
    for q in range(2 * n):
        induction[q, q - n + 1 if q >= n else q] = 1.0
        previous[q, max(q - 1, 0)] = 1.0
    patterns = torch.stack([induction, previous])[None, None]  # [1 layer, 1 sequence, 2 heads, 2n, 2n]
    assert repeated_sequence_score(patterns, n)[0].tolist() == [1.0, 0.0]
    scores = induction_scores(inspected_variant("mha"), length=10, sequences=2)  # a random model: no induction
    assert scores.shape == (2, 4) and scores.max().item() < 0.5


# ---- the command on real runs --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-block micro model trained 12 steps, with weights-only snapshots every 4."""
    out = tmp_path_factory.mktemp("inspect") / "run"
    sets = [f"--set={k}={v}" for k, v in {**MICRO, "n_blocks": 2}.items()]
    assert main(["train", "--data", str(data_dir()), "--out", str(out), *sets, "--batch-size", "4",
                 "--seq-len", "32", "--max-steps", "12", "--snapshot-every", "4", "--eval-every", "0",
                 "--sample-tokens", "0", "--no-progress", "--seed", "1", "--dtype", "fp32", "--compile", "off",
                 "--attention", "sdpa"]) == 0
    return out


def inspect_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["inspect", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["inspect", *args]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_snapshots_are_weights_only_and_the_induction_view_reads_them(trained: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    snapshots = list_checkpoints(trained / SNAPSHOTS)
    assert [p.name for p in snapshots] == ["step_00000004", "step_00000008", "step_00000012"]
    assert all(not (p / "train_state.pt").exists() for p in snapshots)
    assert read_checkpoint_config(snapshots[0])["snapshot"] is True
    curve = inspect_json(capsys, "induction", "--checkpoint", str(trained))
    assert curve["steps"] == [4, 8, 12]
    assert len(curve["induction"][0]) == 2 and len(curve["induction"][0][0]) == MICRO["n_head"]
    assert all(isinstance(v, float) for v in curve["icl"])
    assert curve == induction_curve(trained)  # deterministic: the random sequences come from a seed
    fewer = inspect_json(capsys, "induction", "--checkpoint", str(trained), "--windows", "8")
    assert curve["windows"] == 64 and fewer["windows"] == 8 and fewer["induction"] == curve["induction"]
    assert fewer == induction_curve(trained, windows=8) and fewer["icl"] != curve["icl"]
    assert "ICL score" in (main(["inspect", "induction", "--checkpoint", str(trained)]) == 0 and
                           capsys.readouterr().out)


def test_every_view_prints_json_on_a_trained_run(trained: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = str(trained)
    inspected = load_for_inspection(run)
    ids = inspected.encode("def alpha(beta, gamma):")
    lens = inspect_json(capsys, "lens", "--checkpoint", run, "--prompt", "def alpha(beta, gamma):")
    assert lens["ids"] == ids and len(lens["lens"]) == 2 and len(lens["lens"][0]) == len(ids)
    assert all(len(cell["ids"]) == 5 and cell["probs"] == sorted(cell["probs"], reverse=True)
               for cell in lens["lens"][-1])
    attention = inspect_json(capsys, "attention", "--checkpoint", run, "--prompt", "def alpha(beta, gamma):",
                             "--layer", "1")
    assert attention["layers"] == [1] and len(attention["attention"][0]) == MICRO["n_head"]
    assert len(attention["attention"][0][0]) == len(ids) == len(attention["attention"][0][0][0])
    assert attention["kv_head"] == [0, 0]  # one key/value head shared by both query heads
    attribution = inspect_json(capsys, "attribution", "--checkpoint", run, "--prompt", "def alpha(beta, gamma):")
    assert attribution["residual_error"] < 1e-5
    patch = inspect_json(capsys, "patch", "--checkpoint", run, "--clean", "return alpha + 12",
                         "--corrupt", "return alpha + 37")
    assert len(patch["residual"]) == 3 and patch["residual"][-1][-1] == pytest.approx(1.0, abs=1e-9)
    neurons = inspect_json(capsys, "neurons", "--checkpoint", run, "--layer", "1", "--neuron", "3", "--top", "4")
    values = [e["activation"] for e in neurons["examples"]]
    assert values == sorted(values, reverse=True) and len(values) == 4
    assert all(e["activations"][e["at"]] == e["activation"] for e in neurons["examples"])
    assert neurons["data"] == str(data_dir())
    width = inspected.model.blocks[1].mlp.down.in_features
    one_hot = tmp_path / "direction.json"
    one_hot.write_text(json.dumps([1.0 if i == 3 else 0.0 for i in range(width)]))
    along = inspect_json(capsys, "neurons", "--checkpoint", run, "--layer", "1", "--direction", str(one_hot),
                         "--top", "4")
    assert along["examples"] == neurons["examples"] and along["neuron"] is None
    head = inspect_json(capsys, "attention", "--checkpoint", run, "--prompt", "def alpha(beta, gamma):", "--head", "1")
    assert head["heads"] == [1] and head["attention"][1][0] == attention["attention"][0][1]
    token = inspected.label(ids[0])
    neighbours = inspect_json(capsys, "neurons", "--checkpoint", run, "--token", token, "--top", "3")
    assert len(neighbours["neighbours"]) == 3 and ids[0] not in [n["id"] for n in neighbours["neighbours"]]
    assert neighbours == embedding_neighbours(inspected, ids[0], 3)
    assert top_activations(inspected, 1, 3, top=4)["examples"] == neurons["examples"]


def test_bad_input_is_one_line(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(trained)
    assert "same token length" in refused(capsys, "patch", "--checkpoint", run, "--clean", "return alpha",
                                          "--corrupt", "return alpha + beta")
    assert "out of range" in refused(capsys, "attention", "--checkpoint", run, "--prompt", "x", "--layer", "2")
    assert "out of range" in refused(capsys, "neurons", "--checkpoint", run, "--layer", "5", "--neuron", "0")
    assert "out of range" in refused(capsys, "neurons", "--checkpoint", run, "--layer", "0", "--neuron", "100000")
    assert "not one" in refused(capsys, "lens", "--checkpoint", run, "--prompt", "x", "--target", "alpha beta gamma")
    assert "same" in refused(capsys, "patch", "--checkpoint", run, "--clean", "return 1", "--corrupt", "return 1")
    assert "not found" in refused(capsys, "lens", "--checkpoint", str(tmp_path / "nothing"), "--prompt", "x")
    assert "is for inspect patch" in refused(capsys, "lens", "--checkpoint", run, "--prompt", "x", "--clean", "y")
    assert "unknown view" in refused(capsys, "lenz", "--checkpoint", run, "--prompt", "x")
    assert "needs --corrupt" in refused(capsys, "patch", "--checkpoint", run, "--clean", "x")
    assert "at least 1" in refused(capsys, "lens", "--checkpoint", run, "--prompt", "x", "--top", "0")
    assert "at most 1000" in refused(capsys, "neurons", "--checkpoint", run, "--neuron", "0", "--top", str(10**12))
    assert "at least 8" in refused(capsys, "induction", "--checkpoint", run, "--windows", "0")
    assert "a multiple of 8" in refused(capsys, "neurons", "--checkpoint", run, "--neuron", "0", "--windows", "10")
    assert "is for inspect neurons / induction" in refused(capsys, "lens", "--checkpoint", run, "--prompt", "x",
                                                           "--windows", "16")
    assert "out of range" in refused(capsys, "attention", "--checkpoint", run, "--prompt", "x", "--head", "2")
    (tmp_path / "short.json").write_text("[1, 2]")
    (tmp_path / "text.json").write_text('{"a": 1}')
    for file, words in (("short.json", "has 2 numbers"), ("text.json", "JSON list")):
        assert words in refused(capsys, "neurons", "--checkpoint", run, "--direction", str(tmp_path / file))
    reward = tmp_path / "reward"
    shutil.copytree(trained, reward)
    checkpoint = list_checkpoints(reward)[-1]
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "reward_head": "score"}))
    assert "reward model" in refused(capsys, "lens", "--checkpoint", str(reward), "--prompt", "x")


def test_a_mixture_of_experts_has_no_neurons_to_rank(tmp_path: Path) -> None:
    inspected = inspected_variant("moe")
    with pytest.raises(TinyLMError, match="mixture of experts"):
        top_activations(inspected, 0, 0, data_dir=data_dir())


def test_an_sft_checkpoint_inspects_like_a_pretraining_one(trained: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Its chat tokens and lineage change nothing for the views."""
    from test_sft import sft_args

    assert main(sft_args(tmp_path / "sft", "--max-steps", "2", "--eval-every", "0")) == 0
    capsys.readouterr()
    lens = inspect_json(capsys, "lens", "--checkpoint", str(tmp_path / "sft"), "--prompt", "What is 2 + 3?")
    assert len(lens["lens"][-1]) == len(lens["ids"])
    patch = inspect_json(capsys, "patch", "--checkpoint", str(tmp_path / "sft"), "--chat", "--clean", "What is 2 + 3?",
                         "--corrupt", "What is 2 + 4?", "--metric", "logprob")
    assert patch["residual"][-1][-1] == pytest.approx(1.0, abs=1e-9)
    sft = load_for_inspection(tmp_path / "sft")
    chat = ChatFormat.from_tokenizer(sft.tokenizer)
    assert patch["clean"]["ids"] == chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    assert "not a chat model" in refused(capsys, "lens", "--checkpoint", str(trained), "--chat", "--prompt", "x")
