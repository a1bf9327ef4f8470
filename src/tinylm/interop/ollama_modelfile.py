"""The Ollama `Modelfile` written beside a GGUF export, so `ollama create NAME -f Modelfile` works unchanged.

Ollama does not run the GGUF's Jinja chat template; it renders its own TEMPLATE, written in Go's
text/template language over `.Messages`. This one writes exactly what tinylm's chat format does
(tokenizer/chat_format.py): end-of-text first, each message as its role token + content + <|end|>,
then <|assistant|> to open the reply. As in Ollama's own templates, a final assistant message is
left open, so a request can continue it. A base model's template is the prompt as it is.

A model with the agent tokens gets the tool parts too, as `tool_calls.py` writes them: the request's
`.Tools` close the system turn ("Tools:", then one JSON object a line), an assistant's reasoning is
<|think|>...<|/think|> and each call <|call|>NAME\\nARGUMENTS<|/call|>, and a `tool` message is a
<|tool|> turn. Ollama offers tools only to a template that reads `.Tools`, and finds the model's calls
by the text after `.ToolCalls` (<|call|>), then the tool's name and a JSON object (read in Ollama's
source: template/, tools/). Ollama hands the template its own parse of a declaration, not the JSON the
client sent, so the template writes it back in OpenAI's key order with Python's separators (what the
model was trained on): type, name, description, parameters (type, properties, required), and of a
property its type, description and enum. Map keys (properties, call arguments) come sorted: the order
of Go's maps, which is the order of the built-in tools' single argument too. Other schema keys
(items, anyOf) are not in Ollama's parse a template can read whole, and are left out.

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

from tinylm.tokenizer.chat_tokens import CALL, END_CALL, END_OF_TURN, END_THINK, ROLE_TOKENS, THINK, TOOL_ROLE
from tinylm.tokenizer.tool_calls import TOOLS_HEADER

# A JSON string as Python's json.dumps(ensure_ascii=False) writes it: Go's %q quotes the same way for
# printable text (Ollama's `json` would write <, > and & as \u003c...), control characters aside.
_STRING = 'printf "%q"'
_VALUE = '{{ if eq (printf "%T" $v) "string" }}{{ printf "%q" $v }}{{ else }}{{ json $v }}{{ end }}'


def _list(items: str) -> str:
    """A JSON list of the strings in `items` (a Go expression), separated by ", "."""
    return "[{{ range $j, $s := " + items + " }}{{ if $j }}, {{ end }}{{ " + _STRING + " $s }}{{ end }}]"


def _tool_json() -> str:
    """One declared tool (`.` in a range over `.Tools`) as json.dumps writes an OpenAI declaration."""
    function, parameters = ".Function", ".Function.Parameters"
    kind = ("{{ if eq (len $p.Type) 1 }}{{ " + _STRING + " (index $p.Type 0) }}{{ else }}" + _list("$p.Type")
            + "{{ end }}")
    enum = '[{{ range $j, $v := $p.Enum }}{{ if $j }}, {{ end }}' + _VALUE + '{{ end }}]'
    prop = ('{{ "{" }}"type": ' + kind + '{{ if $p.Description }}, "description": {{ ' + _STRING
            + ' $p.Description }}{{ end }}{{ if $p.Enum }}, "enum": ' + enum + "{{ end }}}")
    return ('{"type": {{ ' + _STRING + ' .Type }}, "function": {"name": {{ ' + _STRING + " " + function + '.Name }}'
            "{{ if " + function + '.Description }}, "description": {{ ' + _STRING + " " + function
            + '.Description }}{{ end }}, "parameters": {"type": {{ ' + _STRING + " " + parameters + '.Type }}'
            ', "properties": {{ "{" }}{{ $sep := "" }}{{ range $name, $p := ' + parameters + ".Properties }}"
            "{{ $sep }}{{ " + _STRING + " $name }}: " + prop + '{{ $sep = ", " }}{{ end }}}'
            "{{ if " + parameters + '.Required }}, "required": ' + _list(parameters + ".Required") + "{{ end }}}}}")


def _calls() -> str:
    """An assistant message's tool calls, each <|call|>NAME\\nARGUMENTS<|/call|> (Ollama finds calls by <|call|>)."""
    arguments = ('{{ "{" }}{{ $sep := "" }}{{ range $k, $v := .Function.Arguments }}{{ $sep }}{{ ' + _STRING
                 + ' $k }}: ' + _VALUE + '{{ $sep = ", " }}{{ end }}}')
    return ("{{ if .ToolCalls }}{{ range .ToolCalls }}" + CALL + "{{ .Function.Name }}\n" + arguments + END_CALL
            + "{{ end }}{{ end }}")


def chat_go_template(eot_text: str, tools: bool = False) -> str:
    """Ollama's TEMPLATE for tinylm's chat format; `tools`: with the agent tokens' parts (tools, calls, results)."""
    role = ROLE_TOKENS
    system = role["system"] + "{{ .Content }}" + END_OF_TURN
    if not tools:
        return (
            eot_text + "\n"
            "{{- range $i, $m := .Messages }}\n"
            "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
            "{{- if eq .Role \"system\" }}" + system + "\n"
            "{{- else if eq .Role \"user\" }}" + role["user"] + "{{ .Content }}" + END_OF_TURN + "\n"
            "{{- else if eq .Role \"assistant\" }}" + role["assistant"] + "{{ .Content }}"
            "{{ if not $last }}" + END_OF_TURN + "{{ end }}\n"
            "{{- end }}\n"
            "{{- if and $last (ne .Role \"assistant\") }}" + role["assistant"] + "{{ end }}\n"
            "{{- end }}"
        )
    return (
        eot_text + "\n"
        "{{- if .Tools }}" + role["system"] + "{{ if .System }}{{ .System }}\n\n{{ end }}" + TOOLS_HEADER
        + "{{ range .Tools }}\n" + _tool_json() + "{{ end }}" + END_OF_TURN + "{{ end }}\n"
        "{{- range $i, $m := .Messages }}\n"
        "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
        "{{- if eq .Role \"system\" }}{{ if not $.Tools }}" + system + "{{ end }}\n"
        "{{- else if eq .Role \"user\" }}" + role["user"] + "{{ .Content }}" + END_OF_TURN + "\n"
        "{{- else if eq .Role \"tool\" }}" + TOOL_ROLE + "{{ .Content }}" + END_OF_TURN + "\n"
        "{{- else if eq .Role \"assistant\" }}" + role["assistant"]
        + "{{ if .Thinking }}" + THINK + "{{ .Thinking }}" + END_THINK + "{{ end }}{{ .Content }}" + _calls()
        + "{{ if not $last }}" + END_OF_TURN + "{{ end }}\n"
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
              note: str | None = None, tools: bool = False) -> str:
    """The Modelfile's text: FROM the GGUF beside it, TEMPLATE, a stop per end token, num_ctx (and `note`).

    `tools`: the chat format has tool calls (the agent tokens), so the template offers Ollama's tools."""
    template = chat_go_template(eot_text, tools) if chat else "{{ .Prompt }}"
    lines = [f"# {note}"] if note else []
    lines += [f"FROM ./{gguf_name}", f'TEMPLATE """{template}"""']
    lines += [f'PARAMETER stop "{token}"' for token in stop_tokens]
    lines.append(f"PARAMETER num_ctx {context_length}")
    return "\n".join(lines) + "\n"
