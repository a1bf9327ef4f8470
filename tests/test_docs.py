"""The documentation site: it builds strictly, its formulas render, and what it claims is still true.

- `mkdocs build --strict` fails on a broken link, a missing snippet file, a quoted function that no
  longer exists, or a page left out of the nav;
- every file of `src/tinylm/models/` is quoted or named on some page;
- every test a page names (`tests/test_x.py::test_y`) exists;
- every `tinylm report` output shown in a `console` block is what the command prints today;
- the cheap figure script runs, and the committed compare figure is shown with the command that made it.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
TEST_REF = re.compile(r"tests/(test_\w+\.py)::(test_\w+)")


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem + "_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _all_docs_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in PAGES)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_mkdocs_build_strict(site: Path) -> None:
    html = {p: p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    assert any("<math" in text for text in html.values()), "formulas were not rendered to MathML"
    leftovers = [str(p) for p, text in html.items() if "TINYLMMATH" in text or "--8&lt;--" in text]
    assert not leftovers, f"unrendered math or snippet markers in {leftovers}"
    remote = [str(p) for p, text in html.items() if re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', text)]
    assert not remote, f"pages load scripts or styles from the network: {remote}"


def test_rmsnorm_page_quotes_the_real_code(site: Path) -> None:
    page = (site / "modern" / "rmsnorm" / "index.html").read_text(encoding="utf-8")
    assert 'class="nc">RMSNorm</span>' in page and 'class="n">rsqrt</span>' in page  # highlighted source
    assert "<math" in page


def test_every_model_file_is_referenced_by_a_page() -> None:
    text = _all_docs_text()
    model_files = sorted((ROOT / "src/tinylm/models").rglob("*.py"))
    # __init__.py files hold one docstring line and no idea of their own
    missing = [str(f.relative_to(ROOT)) for f in model_files
               if f.name != "__init__.py" and str(f.relative_to(ROOT)) not in text]
    assert not missing, f"no docs page quotes or names {missing}"


def test_every_named_test_exists() -> None:
    refs = set(TEST_REF.findall(_all_docs_text()))
    assert len(refs) >= 30, "pages should name the tests that prove their claims"
    missing = []
    for file, name in sorted(refs):
        path = ROOT / "tests" / file
        if not path.is_file() or not re.search(rf"^def {name}\(", path.read_text(encoding="utf-8"), re.M):
            missing.append(f"tests/{file}::{name}")
    assert not missing, f"docs name tests that do not exist: {missing}"


def test_every_model_page_names_a_test() -> None:
    pages = [DOCS / "classic.md", *sorted((DOCS / "modern").glob("*.md"))]
    silent = [str(p.relative_to(DOCS)) for p in pages if not TEST_REF.search(p.read_text(encoding="utf-8"))]
    assert not silent, f"pages that name no test: {silent}"


def _console_examples() -> list[tuple[str, str, list[str]]]:
    """(page, command, expected output lines) for every `$ tinylm report ...` in a console block."""
    examples = []
    for page in PAGES:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            command, expected = None, []
            for line in [*block.splitlines(), "$ end"]:
                if line.startswith("$ "):
                    if command and command.startswith("tinylm report"):
                        examples.append((page.name, command, expected))
                    command, expected = line[2:].strip(), []
                elif line.strip() and line.strip() != "...":
                    expected.append(line)
    return examples


EXAMPLES = _console_examples()


def test_pages_show_report_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize(("page", "command", "expected"), EXAMPLES, ids=[f"{p}:{c}" for p, c, _ in EXAMPLES])
def test_report_output_on_pages_is_current(page: str, command: str, expected: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from tinylm.cli.main import main

    assert main(shlex.split(command)[1:]) == 0
    printed = {" ".join(line.split()) for line in capsys.readouterr().out.splitlines()}
    stale = [line for line in expected if " ".join(line.split()) not in printed]
    assert not stale, f"{page}: `{command}` no longer prints {stale}"


# ---- the two hooks ---------------------------------------------------------------------------------
def test_math_hook_renders_prose_and_leaves_code_alone() -> None:
    math = _load(DOCS / "hooks" / "math.py")
    source = ("Inline $x^2$ and `$HOME` and \\$5.\n\n$$\\frac{a}{b}$$\n\n"
              "```bash\necho $PATH $x$\n```\nafter $y$, costs $3 and $4\n")
    out, stash = math.render_math(source)
    assert len(stash) == 3  # x^2, the fraction, y
    assert "`$HOME`" in out and "echo $PATH $x$" in out and "$5" in out and "costs $3 and $4" in out
    html = math.restore_math(out, stash)
    assert html.count("<math") == 3 and 'display="block"' in html


def test_math_hook_names_the_page_of_a_bad_formula() -> None:
    math = _load(DOCS / "hooks" / "math.py")
    with pytest.raises(ValueError, match="page.md"):
        math.render_math("$\\frac{a}{$", "page.md")


def test_symbols_hook_quotes_the_current_lines(tmp_path: Path) -> None:
    symbols = _load(DOCS / "hooks" / "symbols.py")
    code = "import os\n\n\nclass A:\n    @staticmethod\n    def f():\n        return 1\n\n\ndef g():\n    pass\n"
    (tmp_path / "m.py").write_text(code)
    assert symbols.resolve('--8<-- "m.py@A.f"', root=tmp_path) == '--8<-- "m.py:5:7"'
    assert symbols.resolve('--8<-- "m.py@g"', root=tmp_path) == '--8<-- "m.py:10:11"'
    assert symbols.resolve('--8<-- "m.py"', root=tmp_path) == '--8<-- "m.py"'
    with pytest.raises(KeyError, match="no function or class A.h"):
        symbols.resolve('--8<-- "m.py@A.h"', "p.md", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="gone.py"):
        symbols.resolve('--8<-- "gone.py@f"', "p.md", root=tmp_path)


# ---- figures ---------------------------------------------------------------------------------------
def test_cheap_figures_are_generated(tmp_path: Path) -> None:
    figures = _load(ROOT / "scripts" / "make_figures.py")
    assert figures.main(["--out", str(tmp_path)]) == 0
    for name in ("classic-block.png", "modern-block.png", "kv-cache-timeline.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
        assert (DOCS / "img" / name).is_file(), f"docs/img/{name} missing: run scripts/make_figures.py"


def test_kv_cache_timeline_records_prefill_then_single_steps() -> None:
    figures = _load(ROOT / "scripts" / "make_figures.py")
    assert figures.kv_cache_calls(prompt_len=6, new_tokens=5) == [(0, 6), (6, 1), (7, 1), (8, 1), (9, 1), (10, 1)]


def test_compare_figure_is_committed_and_shown_with_the_command_that_made_it() -> None:
    figure = _load(ROOT / "scripts" / "make_compare_figure.py")
    png = DOCS / "img" / "compare-loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "docs/img/compare-loss.png missing: run the script"
    page = (DOCS / "pipeline" / "compare.md").read_text(encoding="utf-8")
    assert "../img/compare-loss.png" in page
    assert "tinylm " + " ".join(figure.compare_command(300, 25, Path("compare"))) in page
