"""The Ollama `Modelfile` written beside a GGUF export, so `ollama create NAME -f Modelfile` works unchanged.

Ollama does not run the GGUF's Jinja chat template; it renders its own TEMPLATE, written in Go's
text/template language over `.Messages`. This one writes exactly what tinylm's chat format does
(tokenizer/chat_format.py): end-of-text first, each message as its role token + content + <|end|>,
then <|assistant|> to open the reply. As in Ollama's own templates, a final assistant message is
left open, so a request can continue it. A base model's template is the prompt as it is.

Every token that ends a generation is a `PARAMETER stop` (end-of-text, and a chat model's <|end|>),
so a reply stops where the model ends its turn instead of running on through invented turns, and
`num_ctx` is the context the model was trained for (Ollama's default may be longer).

One thing a Modelfile cannot fix: Ollama runs `qwen3` files in its own Go engine, which splits text
with Qwen2's pattern whatever the file's `tokenizer.ggml.pre` says (read in Ollama's source, not
run: it cannot be installed here), so a QK-norm model's prompts can tokenize differently there than
in tinylm. Its Modelfile says so in a comment, and the export prints it. `llama` files run in
Ollama's llama.cpp runner (its default for them), which honours the GPT-2 split.
"""

from __future__ import annotations

from tinylm.tokenizer.chat_tokens import END_OF_TURN, ROLE_TOKENS


def chat_go_template(eot_text: str) -> str:
    """Ollama's TEMPLATE for tinylm's chat format."""
    role = ROLE_TOKENS
    return (
        eot_text + "\n"
        "{{- range $i, $m := .Messages }}\n"
        "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
        "{{- if eq .Role \"system\" }}" + role["system"] + "{{ .Content }}" + END_OF_TURN + "\n"
        "{{- else if eq .Role \"user\" }}" + role["user"] + "{{ .Content }}" + END_OF_TURN + "\n"
        "{{- else if eq .Role \"assistant\" }}" + role["assistant"] + "{{ .Content }}"
        "{{ if not $last }}" + END_OF_TURN + "{{ end }}\n"
        "{{- end }}\n"
        "{{- if and $last (ne .Role \"assistant\") }}" + role["assistant"] + "{{ end }}\n"
        "{{- end }}"
    )


QWEN3_SPLIT_NOTE = ("Ollama runs qwen3 files in its own engine, which splits text with Qwen2's pattern, not this "
                    "tokenizer's GPT-2 split: prompts can tokenize differently than in tinylm and llama.cpp")


def ollama_note(architecture: str) -> str | None:
    """What Ollama will do differently with this architecture, or None."""
    return QWEN3_SPLIT_NOTE if architecture == "qwen3" else None


def modelfile(gguf_name: str, context_length: int, stop_tokens: list[str], eot_text: str, chat: bool,
              note: str | None = None) -> str:
    """The Modelfile's text: FROM the GGUF beside it, TEMPLATE, a stop per end token, num_ctx (and `note`)."""
    template = chat_go_template(eot_text) if chat else "{{ .Prompt }}"
    lines = [f"# {note}"] if note else []
    lines += [f"FROM ./{gguf_name}", f'TEMPLATE """{template}"""']
    lines += [f'PARAMETER stop "{token}"' for token in stop_tokens]
    lines.append(f"PARAMETER num_ctx {context_length}")
    return "\n".join(lines) + "\n"
