"""Draw the documentation figures that are cheap to make (a second or two on a CPU).

    python scripts/make_figures.py            # writes docs/img/*.png
    python scripts/make_figures.py --out DIR  # somewhere else (the test suite uses a tmp dir)

Nothing here is drawn by hand: the block diagrams list the modules of a model actually built from
the `tiny` preset, with the shapes read off its weights, and the KV-cache timeline records which
positions each forward call computes and which it reads back from a real cache.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402
from torch import nn  # noqa: E402

from tinylm.models.factory import build_model  # noqa: E402
from tinylm.presets import preset_config  # noqa: E402

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
COLORS = {"embed": "#cfe2f3", "norm": "#fff2cc", "attn": "#f4cccc", "mlp": "#d9ead3", "head": "#d9d2e9"}


def _shape(module: nn.Module) -> str:
    """'in→out' of a Linear, 'vocab×dim' of an Embedding, the width of a norm."""
    if isinstance(module, nn.Linear):
        return f"{module.in_features}→{module.out_features}"
    if isinstance(module, nn.Embedding):
        return f"{module.num_embeddings}×{module.embedding_dim}"
    weight = getattr(module, "weight", None)
    return f"{weight.shape[0]}" if weight is not None else ""


def _linears(module: nn.Module) -> str:
    return ", ".join(f"{name} {_shape(child)}" for name, child in module.named_children()
                     if isinstance(child, nn.Linear))


def block_rows(model: nn.Module) -> list[tuple[str, str, str]]:
    """(kind, title, detail) from the bottom of the model to the top, read from the built modules."""
    c = model.config
    block = model.blocks[0]
    rows = [("embed", "token_embed", _shape(model.token_embed))]
    if c.arch == "classic":
        rows.append(("embed", "+ pos_embed (learned positions)", _shape(model.pos_embed)))
        rows += [
            ("norm", "ln1: LayerNorm", _shape(block.ln1)),
            ("attn", "attn: causal self-attention", _linears(block.attn) + f", {c.n_head} heads"),
            ("norm", "ln2: LayerNorm", _shape(block.ln2)),
            ("mlp", "mlp: ReLU, 4x", _linears(block.mlp)),
            ("norm", "ln_f: LayerNorm", _shape(model.ln_f)),
            ("head", "lm_head (own matrix, bias)" if model.lm_head.bias is not None else "lm_head (own matrix)",
             _shape(model.lm_head)),
        ]
    else:
        tied = model.lm_head.weight is model.token_embed.weight
        rows += [
            ("norm", "attn_norm: RMSNorm", _shape(block.attn_norm)),
            ("attn", f"attn: GQA + RoPE, {c.n_head} query / {c.kv_heads} KV heads", _linears(block.attn)),
            ("norm", "mlp_norm: RMSNorm", _shape(block.mlp_norm)),
            ("mlp", "mlp: SwiGLU", _linears(block.mlp)),
            ("norm", "norm: RMSNorm", _shape(model.norm)),
            ("head", "lm_head" + (" (tied to token_embed)" if tied else ""), _shape(model.lm_head)),
        ]
    return rows


def draw_block_diagram(arch: str, path: Path) -> None:
    model = build_model(preset_config("tiny", arch))
    rows = block_rows(model)
    fig, ax = plt.subplots(figsize=(7.2, 0.72 * len(rows) + 1.0))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(rows) + 0.2)
    ax.axis("off")
    ys = list(range(len(rows)))
    for y, (kind, title, detail) in zip(ys, rows):
        ax.add_patch(FancyBboxPatch((1.6, y), 6.8, 0.62, boxstyle="round,pad=0.02,rounding_size=0.1",
                                    facecolor=COLORS[kind], edgecolor="#444444"))
        ax.text(5.0, y + 0.40, title, ha="center", va="center", fontsize=9.5, weight="bold")
        ax.text(5.0, y + 0.16, detail, ha="center", va="center", fontsize=7.5, family="monospace")
        if y + 1 < len(rows):
            ax.add_patch(FancyArrowPatch((5.0, y + 0.64), (5.0, y + 0.98), arrowstyle="-|>", mutation_scale=10))
    first_block = 2 if arch == "classic" else 1  # index of the block's first norm in `rows`
    last_block = first_block + 3
    ax.add_patch(FancyBboxPatch((1.2, first_block - 0.15), 7.6, last_block - first_block + 0.95,
                                boxstyle="round,pad=0.02", fill=False, linestyle="--", edgecolor="#888888"))
    ax.text(9.0, first_block + 1.9, f"× {model.config.n_blocks}\nblocks", ha="left", va="center", fontsize=10)
    for start in (first_block, first_block + 2):  # x = x + sublayer(norm(x)): the residual skips two boxes
        ax.add_patch(FancyArrowPatch((1.6, start - 0.2), (1.6, start + 1.8), connectionstyle="arc3,rad=0.5",
                                     arrowstyle="-|>", mutation_scale=10, color="#1155cc"))
    ax.text(0.05, first_block + 0.9, "residual\nx + f(norm(x))", fontsize=7.5, color="#1155cc", va="center")
    params = model.num_params()
    ax.set_title(f"{arch} model, tiny preset: {params:,} parameters", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def kv_cache_calls(prompt_len: int = 6, new_tokens: int = 5) -> list[tuple[int, int]]:
    """(first slot computed, slots computed) of each forward call of a real cached generation."""
    torch.manual_seed(0)
    model = build_model(preset_config("tiny", "modern", n_blocks=1)).eval()
    cache = model.new_cache(1, max_len=prompt_len + new_tokens)
    tokens = torch.randint(0, model.config.vocab_size, (1, prompt_len))
    calls = []
    with torch.no_grad():
        for _ in range(new_tokens + 1):
            start = cache.length
            hidden = model.forward_hidden(tokens, cache=cache)
            calls.append((start, cache.length - start))
            tokens = model.lm_head(hidden[:, -1:]).argmax(-1)
    return calls


def draw_kv_cache_timeline(path: Path) -> None:
    calls = kv_cache_calls()
    total = calls[-1][0] + calls[-1][1]
    fig, ax = plt.subplots(figsize=(7.2, 0.5 * len(calls) + 1.3))
    for row, (start, count) in enumerate(calls):
        y = len(calls) - 1 - row
        for slot in range(total):
            if slot < start:
                color, label = "#cfe2f3", "read from the cache"
            elif slot < start + count:
                color, label = "#e06666", "computed in this call"
            else:
                color, label = "#f3f3f3", "not generated yet"
            ax.add_patch(plt.Rectangle((slot, y), 0.92, 0.8, facecolor=color, edgecolor="#666666", label=label))
        name = "prefill" if row == 0 else f"decode {row}"
        ax.text(-0.3, y + 0.4, name, ha="right", va="center", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3,
              fontsize=8, frameon=False)
    ax.set_xlim(-2.2, total + 0.2)
    ax.set_ylim(-0.2, len(calls))
    ax.set_xticks([s + 0.46 for s in range(total)], [str(s) for s in range(total)], fontsize=8)
    ax.set_yticks([])
    ax.set_xlabel("cache slot (token position)", fontsize=9)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title("One prompt, then one token per step: what each forward call computes", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOCS_IMG, help="output folder (default: docs/img)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for arch in ("classic", "modern"):
        draw_block_diagram(arch, args.out / f"{arch}-block.png")
    draw_kv_cache_timeline(args.out / "kv-cache-timeline.png")
    print("\n".join(str(p) for p in sorted(args.out.glob("*.png"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
