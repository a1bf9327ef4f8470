"""MkDocs hook: render $...$ and $$...$$ as MathML at build time, so the site needs no CDN or JavaScript.

Browsers render MathML natively. The conversion (LaTeX -> MathML) uses `latex2mathml`. Code is left
alone: fenced blocks and inline code spans are skipped, so `$HOME` in a shell snippet stays text.
The MathML is swapped for a plain placeholder before Markdown runs (Markdown would otherwise read
`_` and `*` inside it as emphasis) and put back into the finished HTML. A formula that
latex2mathml cannot parse fails the build, naming the page.
"""

from __future__ import annotations

import re
from typing import Any

from latex2mathml.converter import convert

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)
DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
# $x$: no space just inside the dollars, not \$, and no digit right after the closing $ ("$5 and $6")
INLINE = re.compile(r"(?<![\\$])\$(?=\S)(.+?)(?<=\S)(?<!\\)\$(?![\d$])")
PLACEHOLDER = "TINYLMMATH{}X"

_rendered: dict[str, list[str]] = {}


def _split_fences(markdown: str) -> list[tuple[bool, str]]:
    """(is_code, text) pieces: fenced code blocks are code, everything between them is prose."""
    pieces: list[tuple[bool, str]] = []
    prose: list[str] = []
    code: list[str] = []
    open_fence: str | None = None
    for line in markdown.splitlines(keepends=True):
        match = FENCE.match(line)
        if open_fence is None:
            if match:
                pieces.append((False, "".join(prose)))
                prose, code, open_fence = [], [line], match["fence"]
            else:
                prose.append(line)
        else:
            code.append(line)
            closes = match and line.strip() == match["fence"] and match["fence"][0] == open_fence[0]
            if closes and len(match["fence"]) >= len(open_fence):
                pieces.append((True, "".join(code)))
                code, open_fence = [], None
    pieces.append((False, "".join(prose)))
    if code:  # an unclosed fence runs to the end of the page, as in Markdown
        pieces.append((True, "".join(code)))
    return pieces


def _to_mathml(latex: str, display: bool, page: str) -> str:
    try:
        return convert(latex.strip(), display="block" if display else "inline")
    except Exception as exc:  # noqa: BLE001 - any parse failure is an error in the page
        raise ValueError(f"{page}: cannot render math {latex.strip()!r}: {exc}") from exc


def render_math(markdown: str, page: str = "<page>") -> tuple[str, list[str]]:
    """Markdown with formulas replaced by placeholders, and the MathML for each placeholder."""
    stash: list[str] = []

    def keep(mathml: str) -> str:
        stash.append(mathml)
        return PLACEHOLDER.format(len(stash) - 1)

    def prose_math(text: str) -> str:
        code_spans: list[str] = []

        def hide_code(match: re.Match[str]) -> str:
            code_spans.append(match[0])
            return f"\x00{len(code_spans) - 1}\x00"

        text = INLINE_CODE.sub(hide_code, text)
        text = DISPLAY.sub(lambda m: "\n\n<div class=\"math\">" + keep(_to_mathml(m[1], True, page))
                           + "</div>\n\n", text)
        text = INLINE.sub(lambda m: keep(_to_mathml(m[1], False, page)), text)
        text = text.replace("\\$", "$")
        return re.sub("\x00(\\d+)\x00", lambda m: code_spans[int(m[1])], text)

    out = "".join(text if is_code else prose_math(text) for is_code, text in _split_fences(markdown))
    return out, stash


def restore_math(html: str, stash: list[str]) -> str:
    return re.sub(r"TINYLMMATH(\d+)X", lambda m: stash[int(m[1])], html)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    out, stash = render_math(markdown, page.file.src_uri)
    _rendered[page.file.src_uri] = stash
    return out


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    return restore_math(html, _rendered.pop(page.file.src_uri, []))
