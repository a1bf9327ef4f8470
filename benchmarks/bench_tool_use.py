"""What a tool-using checkpoint does on a task's held-out problems, beyond exact-match (evaluate/tool_use.py).

    .venv/bin/python benchmarks/bench_tool_use.py --checkpoint runs/calc-sft [--task "builtin:calc?hard_share=1"]
                                                  [--examples 200] [--max-new-tokens 32]

Greedy, through the same tool loop as `tinylm eval`. Prints one JSON object: the shares of problems
where the model called, called right, answered with the tool's result, and answered right.
docs/posttrain/tools.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.evaluate.exact_match import tool_runs
from tinylm.evaluate.tool_use import tool_use_anatomy
from tinylm.tasks.registry import get_task
from tinylm.tokenizer.chat_format import ChatFormat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--task", default="builtin:calc?hard_share=1")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    try:
        model, tokenizer, _ = load_model(args.checkpoint)
        chat = ChatFormat.from_tokenizer(tokenizer)
        task = get_task(args.task)
    except TinyLMError as exc:  # a missing or corrupt checkpoint, an unknown task: one line
        sys.exit(f"bench_tool_use: error: {exc}")
    examples = task.examples("test", args.examples, seed=0)
    with torch.no_grad():
        runs = tool_runs(model, chat, [e.prompt for e in examples], task.tools,
                         max(args.max_new_tokens, task.reply_tokens))
    print(json.dumps({"checkpoint": args.checkpoint, "task": args.task, "examples": len(examples),
                      **tool_use_anatomy(task, examples, runs)}))


if __name__ == "__main__":
    main()
