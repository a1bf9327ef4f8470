"""Look inside a checkpoint: what every layer and head computes on a prompt (interpret/).

Views (each prints a readable summary, or with --json everything the studio's Inside page draws):
  lens         the logit lens: every block's residual stream read through the final norm and head
  attention    every head's attention pattern, with entropy, previous-/first-token and induction scores
  attribution  a target token's logit split into the embedding's, each head's and each MLP's parts
  patch        activation patching between a clean and a corrupted prompt of the same token length
  neurons      an MLP neuron's top-activating windows on the dev split, or a token's embedding neighbours
  induction    induction and in-context-learning scores over every saved checkpoint of a run

examples:
  tinylm inspect lens --checkpoint runs/tiny-modern --prompt "def main():" --target " return"
  tinylm inspect attention --checkpoint runs/tiny-modern --prompt "a b c a b c" --layer 1 --json
  tinylm inspect attribution --checkpoint runs/pipeline/sft --chat --prompt "What is 23 + 45?"
  tinylm inspect patch --checkpoint runs/pipeline/sft --chat --clean "What is 23 + 45?" --corrupt "What is 23 + 55?"
  tinylm inspect neurons --checkpoint runs/tiny-modern --layer 0 --neuron 17
  tinylm inspect induction --checkpoint runs/tiny-modern      (with `tinylm train --snapshot-every 50`)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from tinylm.cli.options import add_option
from tinylm.errors import TinyLMError
from tinylm.interpret.attention import attention_view
from tinylm.interpret.attribution import logit_attribution
from tinylm.interpret.induction import induction_curve
from tinylm.interpret.lens import logit_lens
from tinylm.interpret.loading import DEV_BATCH, DEV_WINDOWS, load_for_inspection
from tinylm.interpret.neurons import embedding_neighbours, top_activations
from tinylm.interpret.patching import METRICS, activation_patching
from tinylm.options import CHECKPOINT, JSON

HELP = "look inside a checkpoint: logit lens, attention, attribution, patching, neurons, induction heads"
VIEWS = ("lens", "attention", "attribution", "patch", "neurons", "induction")


# which views read each option (an option given to another view is refused: it would be silently ignored)
OPTION_VIEWS: dict[str, tuple[str, ...]] = {
    "prompt": ("lens", "attention", "attribution"), "target": ("lens", "attribution"),
    "layer": ("attention", "neurons"), "head": ("attention",), "versus": ("attribution",), "position": ("attribution",),
    "chat": ("lens", "attention", "attribution", "patch"), "clean": ("patch",), "corrupt": ("patch",),
    "metric": ("patch",), "answer": ("patch",), "wrong": ("patch",),
    "neuron": ("neurons",), "direction": ("neurons",), "token": ("neurons",), "top": ("lens", "neurons"),
    "data": ("neurons", "induction"), "windows": ("neurons", "induction"),
}
MAX_TOP = 1000  # guesses, windows or tokens: more is a typo, and would print the whole dev split
REQUIRED: dict[str, tuple[str, ...]] = {"lens": ("prompt",), "attention": ("prompt",), "attribution": ("prompt",),
                                        "patch": ("clean", "corrupt")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("view", metavar="VIEW", help=f"one of {', '.join(VIEWS)}")
    add_option(parser, "checkpoint", CHECKPOINT)
    add_option(parser, "json", JSON, False, note="(what the studio's Inside page draws)")
    parser.add_argument("--prompt", metavar="TEXT", help="lens, attention, attribution: the text to look at")
    parser.add_argument("--chat", action="store_true", default=None,
                        help="lens, attention, attribution, patch: each prompt is a user message in the chat model's "
                             "format, up to the opening of its answer")
    parser.add_argument("--target", metavar="TOKEN", help="lens, attribution: a token (exactly one of the "
                        "tokenizer's, leading space included); attribution's default: the top guess")
    parser.add_argument("--layer", type=int, metavar="N", help="attention: only this layer; neurons: the MLP's layer")
    parser.add_argument("--head", type=int, metavar="H", help="attention: only this head")
    parser.add_argument("--versus", metavar="TOKEN", help="attribution: attribute the logit difference target - versus")
    parser.add_argument("--position", type=int, metavar="P", help="attribution: the position (default: the last)")
    parser.add_argument("--clean", metavar="TEXT", help="patch: the prompt whose behaviour is restored")
    parser.add_argument("--corrupt", metavar="TEXT", help="patch: the corrupted prompt, as many tokens as --clean")
    parser.add_argument("--metric", choices=METRICS, help="patch: logit_diff (answer minus wrong at the last "
                                                          "position, the default) or logprob (the answer's)")
    parser.add_argument("--answer", metavar="TOKEN", help="patch: default: the clean prompt's top guess")
    parser.add_argument("--wrong", metavar="TOKEN", help="patch: default: the corrupted prompt's top other guess")
    parser.add_argument("--neuron", type=int, metavar="I", help="neurons: which neuron of --layer's MLP")
    parser.add_argument("--direction", metavar="FILE", help="neurons: a JSON list of one weight per neuron of "
                        "--layer's MLP: rank windows by that direction in neuron space instead of one neuron")
    parser.add_argument("--token", metavar="TOKEN", help="neurons: its nearest tokens in the embedding instead")
    parser.add_argument("--top", type=int, metavar="K", help="lens: guesses per layer and position (default 5); "
                        "neurons: how many windows or tokens (default 10)")
    parser.add_argument("--data", metavar="DIR", help="neurons, induction: a prepared folder (default: the run's "
                                                      "pretraining data)")
    parser.add_argument("--windows", type=int, metavar="N", help="neurons, induction: how many context-long dev "
                        "windows to read, from the start of the dev split (a multiple of 8, default 64; the ICL "
                        "score of a checkpoint moves with the text read, so compare runs at the same N)")


def check_view_options(args: argparse.Namespace) -> None:
    """One line for an unknown view, an option the view does not read, or one it needs and lacks."""
    if args.view not in VIEWS:
        raise TinyLMError(f"inspect: unknown view {args.view!r}: one of {', '.join(VIEWS)}")
    for name, views in OPTION_VIEWS.items():
        if getattr(args, name) is not None and args.view not in views:
            raise TinyLMError(f"inspect {args.view}: --{name.replace('_', '-')} is for inspect {' / '.join(views)}")
    for name in REQUIRED.get(args.view, ()):
        if getattr(args, name) is None:
            raise TinyLMError(f"inspect {args.view} needs --{name}")
    if args.top is not None and not 1 <= args.top <= MAX_TOP:
        raise TinyLMError(f"--top must be at least 1 and at most {MAX_TOP}")
    if args.windows is not None and (args.windows < DEV_BATCH or args.windows % DEV_BATCH):
        raise TinyLMError(f"--windows must be a multiple of {DEV_BATCH} (dev windows are read {DEV_BATCH} at a "
                          f"time), at least {DEV_BATCH}, not {args.windows}")


def run(args: argparse.Namespace) -> int:
    check_view_options(args)
    if args.view == "induction":
        return emit(induction_curve(args.checkpoint, args.data, windows=args.windows or DEV_WINDOWS), args.json,
                    show_induction)
    inspected = load_for_inspection(args.checkpoint)

    def encode(text: str, what: str = "prompt") -> list[int]:
        return inspected.encode(text, what, bool(args.chat))

    if args.view == "lens":
        target = inspected.token_id(args.target) if args.target is not None else None
        return emit(logit_lens(inspected, encode(args.prompt), args.top or 5, target), args.json,
                    show_lens)
    if args.view == "attention":
        return emit(attention_view(inspected, encode(args.prompt), args.layer, args.head), args.json, show_attention)
    if args.view == "attribution":
        ids = encode(args.prompt)
        position = -1 if args.position is None else args.position
        target = inspected.token_id(args.target) if args.target is not None else None
        versus = inspected.token_id(args.versus, "--versus token") if args.versus is not None else None
        return emit(logit_attribution(inspected, ids, target, versus, position), args.json, show_attribution)
    if args.view == "patch":
        answer = inspected.token_id(args.answer, "answer") if args.answer is not None else None
        wrong = inspected.token_id(args.wrong, "wrong answer") if args.wrong is not None else None
        result = activation_patching(inspected, encode(args.clean, "clean prompt"),
                                     encode(args.corrupt, "corrupted prompt"), args.metric or "logit_diff",
                                     answer, wrong)
        return emit(result, args.json, show_patch)
    top = args.top or 10
    if args.token is not None:
        return emit(embedding_neighbours(inspected, inspected.token_id(args.token, "token"), top), args.json,
                    show_neighbours)
    if (args.neuron is None) == (args.direction is None):
        raise TinyLMError("inspect neurons: give one of --neuron I or --direction FILE (with --layer N), or --token")
    direction = read_direction(args.direction) if args.direction is not None else None
    return emit(top_activations(inspected, args.layer or 0, args.neuron, args.data, windows=args.windows or DEV_WINDOWS,
                                top=top, direction=direction),
                args.json, show_neurons)


def read_direction(path: str) -> list[float]:
    """A JSON list of numbers, or one line naming the file and what is wrong."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TinyLMError(f"--direction {path}: cannot read a JSON list from it ({exc})") from None
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise TinyLMError(f"--direction {path}: must hold a JSON list of finite numbers, one per neuron")
    return [float(v) for v in values]


def emit(result: dict[str, Any], as_json: bool, show: Any) -> int:
    print(json.dumps(result) if as_json else show(result))
    return 0


def _tok(text: str) -> str:
    return repr(text)[1:-1]


def show_lens(r: dict[str, Any]) -> str:
    lines = ["top guess (probability) after each block, by position:"]
    lines.append("layer  " + " | ".join(f"{_tok(t):>14}" for t in r["tokens"]))
    for layer, row in enumerate(r["lens"]):
        cells = [f"{_tok(c['tokens'][0])[:8]:>8} {c['probs'][0]:.2f}" for c in row]
        lines.append(f"{layer:>5}  " + " | ".join(f"{c:>14}" for c in cells))
    if "target" in r:
        t = r["target"]
        lines.append(f"target {_tok(t['token'])!r} at the last position: "
                     + ", ".join(f"layer {i}: p={p[-1]:.3f} rank {k[-1]}" for i, (p, k) in
                                 enumerate(zip(t["prob"], t["rank"]))))
    return "\n".join(lines)


def show_attention(r: dict[str, Any]) -> str:
    lines = [r["attention_kind"], "layer head  kv  entropy  prev-token  first-token  induction"]
    for i, layer in enumerate(r["layers"]):
        for head in range(len(r["attention"][i])):
            s = {name: values[i][head] for name, values in r["scores"].items()}
            lines.append(f"{layer:>5} {head:>4} {r['kv_head'][head]:>3}  {s['entropy']:7.3f}  "
                         f"{s['previous_token']:10.3f}  {s['first_token']:11.3f}  {s['induction']:9.3f}")
    lines.append("(--json: every pattern A[layer][head][query][key])")
    return "\n".join(lines)


def show_attribution(r: dict[str, Any]) -> str:
    what = f"logit of {_tok(r['target']['token'])!r}"
    if r["versus"]:
        what += f" minus that of {_tok(r['versus']['token'])!r}"
    lines = [f"{what} at position {r['position']}: {r['logit']:.4f}"
             + (" (before the soft cap)" if r["before_soft_cap"] else "")]
    for part in sorted(r["parts"], key=lambda p: -abs(p["value"])):
        lines.append(f"  {part['name']:>22}  {part['value']:+.4f}")
    lines.append(f"  {'sum':>22}  {r['sum']:+.4f}   (residual error {r['residual_error']:.1e})")
    return "\n".join(lines)


def _grid(title: str, rows: list[list[float]], row_name: str, columns: list[str]) -> list[str]:
    lines = [title, f"{row_name:>8} " + " ".join(f"{_tok(c)[:6]:>6}" for c in columns)]
    lines += [f"{i:>8} " + " ".join(f"{v:6.2f}" for v in row) for i, row in enumerate(rows)]
    return lines


def show_patch(r: dict[str, Any]) -> str:
    m = r["metric"]
    lines = [f"{m['name']} ({_tok(r['answer']['token'])!r} vs {_tok(r['wrong']['token'])!r}): clean {m['clean']:.4f}, "
             f"corrupted {m['corrupted']:.4f}; share restored by patching in the clean activation:"]
    tokens = r["clean"]["tokens"]
    lines += _grid("residual stream (layer 0: embedding; layer l: after block l-1)", r["residual"], "layer", tokens)
    lines += _grid("MLP outputs", r["mlp"], "layer", tokens)
    heads = [f"H{h}" for h in range(len(r["heads"][0]))]
    lines += _grid("head outputs (all positions)", r["heads"], "layer", heads)
    return "\n".join(lines)


def show_neurons(r: dict[str, Any]) -> str:
    which = f"neuron {r['neuron']}" if r["neuron"] is not None else "the direction given"
    lines = [f"layer {r['layer']} {which}: top activations over {r['windows']} dev windows of {r['data']}"]
    for e in r["examples"]:
        text = "".join(f"[[{t}]]" if i == e["at"] else t for i, t in enumerate(e["tokens"]))
        lines.append(f"  {e['activation']:8.3f}  {_tok(text)}")
    return "\n".join(lines)


def show_neighbours(r: dict[str, Any]) -> str:
    lines = [f"nearest tokens to {_tok(r['token']['token'])!r} in the embedding (cosine):"]
    lines += [f"  {n['cosine']:.3f}  {_tok(n['token'])!r}" for n in r["neighbours"]]
    return "\n".join(lines)


def show_induction(r: dict[str, Any]) -> str:
    layer, head = r["best_head"]
    lines = [f"{r['run']}: induction score of every head, and the in-context-learning score, by step",
             f"{'step':>8}  best head L{layer}H{head}  max over heads  ICL score"]
    for step, scores, icl in zip(r["steps"], r["induction"], r["icl"]):
        top = max(max(row) for row in scores)
        lines.append(f"{step:>8}  {scores[layer][head]:16.3f}  {top:14.3f}  {icl:+9.3f}")
    return "\n".join(lines)
