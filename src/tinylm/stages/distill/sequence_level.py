"""Sequence-level distillation (Kim & Rush 2016): the teacher answers, its answers become the student's SFT data.

The teacher answers the task's training prompts greedily; each answer replaces the reference answer
in its conversation. With a checker (every built-in task has one) the answers it accepts can be kept
alone (`--keep-correct`), which is how reasoning traces are distilled from a stronger model
(DeepSeek-R1's distilled models learned from 800k such samples). The conversations are written to
RUN/teacher_answers.jsonl, one `{"messages": [...]}` row each, which `tinylm sft --data` reads as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from tinylm.evaluate.exact_match import generate_replies
from tinylm.tasks.task import Example, Task
from tinylm.tokenizer.chat_format import ChatFormat

ANSWERS = "teacher_answers.jsonl"


@dataclass
class TeacherAnswers:
    conversations: list[list[dict[str, Any]]]
    asked: int
    correct: int

    def describe(self, keep_correct: bool) -> str:
        kept = f", {len(self.conversations):,} kept" if keep_correct else ""
        return (f"sequence-level: the teacher answered {self.asked:,} training prompts, {self.correct:,} "
                f"({self.correct / max(self.asked, 1):.1%}) verified{kept}")


def teacher_answers(teacher: nn.Module, chat: ChatFormat, task: Task, problems: list[Example],
                    max_new_tokens: int, keep_correct: bool) -> TeacherAnswers:
    """The teacher's greedy answers to `problems` as conversations (only the verified ones if asked)."""
    replies = generate_replies(teacher, chat, [p.prompt for p in problems], max_new_tokens)
    conversations, correct = [], 0
    for problem, reply in zip(problems, replies):
        ok = task.verify(reply, problem)
        correct += ok
        if ok or not keep_correct:
            conversations.append([*problem.prompt, {"role": "assistant", "content": reply}])
    return TeacherAnswers(conversations, len(problems), correct)


def write_answers(run_dir: Path, answers: TeacherAnswers) -> Path:
    """RUN/teacher_answers.jsonl, written whole (a temporary name, then a rename)."""
    path = run_dir / ANSWERS
    tmp = path.with_name(f".{ANSWERS}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for messages in answers.conversations:
            f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
