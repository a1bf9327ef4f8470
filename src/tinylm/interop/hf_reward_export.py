"""Export a `tinylm reward` checkpoint as a `transformers` sequence-classification model.

    DIR/config.json          LlamaForSequenceClassification / Qwen3ForSequenceClassification / ..., num_labels 1
    DIR/model.safetensors    the backbone under transformers names, our head as `score.weight` [1, n_embed]
    DIR/tokenizer.json, tokenizer_config.json

`transformers`' *ForSequenceClassification models run the decoder, put the `score` layer (no bias) on
every position and read the logit at the last token that is not `pad_token_id`; ours reads the final
hidden state at the last real token. With `pad_token_id` = our end-of-text token, which pads the rows
and otherwise only opens a conversation, the two pick the same token: the exported scores equal ours
(tests/test_reward_export.py: 1e-5 in float32). The backbone mapping is the causal-LM export's
(interop/hf.py); only the head differs, so no language-model head is written. A LoRA reward run's
checkpoint (adapters only) exports with its adapters folded into its base's weights: a plain model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from tinylm.checkpoint.layout import TOKENIZER
from tinylm.checkpoint.load import reward_checkpoint_weights
from tinylm.checkpoint.read import full_state_dict, read_checkpoint_config, resolve_checkpoint
from tinylm.config import ModelConfig
from tinylm.errors import TinyLMError
from tinylm.interop.hf import MODEL_TYPES, hf_architecture, hf_config_dict, to_hf_weights
from tinylm.interop.hf_tokenizer import write_hf_tokenizer
from tinylm.interop.output_folder import output_folder
from tinylm.models.factory import build_model
from tinylm.models.reward_model import BACKBONE, RewardModel

SEQUENCE_CLASSIFICATION = {
    "LlamaForCausalLM": "LlamaForSequenceClassification", "MistralForCausalLM": "MistralForSequenceClassification",
    "Qwen3ForCausalLM": "Qwen3ForSequenceClassification", "GPT2LMHeadModel": "GPT2ForSequenceClassification",
}
SCORE = "score.weight"


def reward_architecture(config: ModelConfig) -> str:
    """The transformers sequence-classification class equal to a reward model on this backbone, or a refusal."""
    causal = hf_architecture(config)
    if causal not in SEQUENCE_CLASSIFICATION:
        raise TinyLMError(f"no sequence-classification export for a {causal} backbone yet "
                          f"(supported: {', '.join(SEQUENCE_CLASSIFICATION)})")
    return SEQUENCE_CLASSIFICATION[causal]


def hf_reward_weights(weights: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """A reward model's state dict (backbone.* and score.weight) under transformers names, no LM head."""
    backbone = {k.removeprefix(BACKBONE): v for k, v in weights.items() if k.startswith(BACKBONE)}
    if SCORE not in weights or not backbone:
        raise TinyLMError("not a reward model's weights: expected backbone.* and score.weight")
    if "lm_head.bias" in backbone:
        backbone["lm_head.bias"] = torch.zeros_like(backbone["lm_head.bias"])  # unused by a reward model
    hf = to_hf_weights(backbone, config)
    hf.pop("lm_head.weight", None)
    hf[SCORE] = weights[SCORE]
    return hf


def hf_reward_config(config: ModelConfig, pad_token_id: int) -> dict[str, object]:
    """config.json of the transformers reward model: the causal LM's, as a one-label classifier."""
    architecture = reward_architecture(config)
    data = hf_config_dict(config, bos_token_id=pad_token_id, eos_token_id=pad_token_id, pad_token_id=pad_token_id)
    return {**data, "architectures": [architecture], "model_type": MODEL_TYPES[hf_architecture(config)],
            "tie_word_embeddings": False, "id2label": {"0": "reward"}, "label2id": {"reward": 0}}


def write_reward_folder(folder: str | Path, weights: dict[str, torch.Tensor], config: ModelConfig,
                        pad_token_id: int) -> None:
    """config.json and model.safetensors of the transformers reward model."""
    folder = Path(folder)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in hf_reward_weights(weights, config).items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    data = {**hf_reward_config(config, pad_token_id), "dtype": str(tensors[SCORE].dtype).removeprefix("torch.")}
    (folder / "config.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def export_reward_checkpoint(checkpoint: str | Path, out: str | Path) -> tuple[Path, str]:
    """Write `out` from a reward checkpoint (or the newest one of a run); return (out, transformers class)."""
    ckpt = resolve_checkpoint(checkpoint)
    meta = read_checkpoint_config(ckpt)
    if meta.get("reward_head") != "score":
        raise TinyLMError(f"{ckpt} is not a reward model checkpoint (written by tinylm reward)")
    config = ModelConfig.from_dict(meta["model"])
    architecture = reward_architecture(config)
    if not (ckpt / TOKENIZER).is_file():
        raise TinyLMError(f"checkpoint {ckpt} has no {TOKENIZER}: transformers needs one next to the model")
    with torch.device("meta"):
        shapes = RewardModel(build_model(config))
    weights = full_state_dict(shapes, reward_checkpoint_weights(ckpt, meta), ckpt)  # a LoRA run's: merged
    with output_folder(out) as folder:
        eot_id = write_hf_tokenizer(ckpt / TOKENIZER, folder, config.context_length,
                                    chat_template=meta.get("chat_template"))
        write_reward_folder(folder, weights, config, pad_token_id=eot_id)
    return Path(out), architecture
