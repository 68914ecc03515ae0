"""The documentation cannot drift: the generated configuration reference covers every
configuration key, the API reference renders every public module, the README and the
docs home stay a front page whose key figures are those of the results pages, and every
results page opens with a dated summary (CI also runs ``mkdocs build --strict``; these
checks need no MkDocs)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

from serl_jax.config import Config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS_HOME = ROOT / "docs" / "index.md"
RESULTS = ROOT / "docs" / "results"
README_MAX_LINES = 150
HOME_MAX_PARAGRAPH_LINES = 8
SUMMARY_MAX_LINES = 10
#: A figure as the pages write it: ``+0.58``, ``−0.12``, ``1,021``, ``0.505``.
NUMBER = re.compile(r"[+−-]?\d[\d,]*(?:\.\d+)?")
#: A pymdownx.snippets include, ``--8<-- "path"`` or ``--8<-- "path:start:end"``.
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\d*))?(?::(\d*))?"$', re.MULTILINE)
DATE = re.compile(r"20\d\d-\d\d-\d\d")


@pytest.fixture(scope="module")
def reference():
    """The docs hook ``docs/hooks/reference.py``, loaded as MkDocs loads it."""
    path = ROOT / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_hooks_reference", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_config_reference_covers_every_key_of_the_default_preset(reference):
    documented = {key.name for key in reference.config_keys()}
    preset = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    in_preset = {f"{section}.{key}" for section, keys in preset.items() for key in keys}
    assert in_preset - documented == set()
    # ...and every key the loader accepts, preset or not.
    in_config = {f"{s}.{k}" for s, keys in Config().to_dict().items() for k in keys}
    assert documented == in_config


def test_config_reference_describes_every_key(reference):
    keys = reference.config_keys()
    assert [k.name for k in keys if not k.description] == []
    assert [k.name for k in keys if not k.type] == []
    markdown = reference.config_reference_markdown()
    for key in keys:
        assert f"| `{key.name}` |" in markdown
    # Defaults are the built-in ones, written as the YAML presets write them.
    assert "| `ppo.lr` | `float` | `0.0003` |" in markdown
    assert "| `env.child_quantity` | `str` | `participation` |" in markdown


def test_attribute_docs_reads_shared_entries_and_ends_at_the_next_section(reference):
    class Example:
        """Summary.

        Attributes:
            a, b: shared
                over two lines.
            c (int): typed.

        Raises:
            ValueError: never.
        """

    assert reference.attribute_docs(Example) == {
        "a": "shared over two lines.",
        "b": "shared over two lines.",
        "c": "typed.",
    }


def test_config_reference_page_asks_for_the_generated_table(reference):
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert reference.MARKER in page
    rendered = reference.on_page_markdown(page)
    assert reference.MARKER not in rendered
    assert "`loop.score`" in rendered


def test_api_reference_renders_every_public_module(reference):
    modules = reference.public_modules()
    assert "serl_jax.envs.execution" in modules and "llm.validate" in modules
    assert "llm.validate._child" not in modules
    assert reference.missing_api_modules() == []


def test_readme_is_a_front_door():
    readme = README.read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    # .ci/run runs the README's install and test commands.
    assert 'pip install -e ".[dev]" && python -m serl_jax.train' in readme
    for page in ("docs/getting-started.md", "docs/results/index.md", "docs/results/benchmark.md"):
        assert f"({page}" in readme and (ROOT / page).is_file()


def _page_text(path: Path) -> str:
    """A docs page as MkDocs renders it: its snippet includes expanded."""

    def include(m: re.Match) -> str:
        lines = (ROOT / m.group(1)).read_text().splitlines()
        start, end = int(m.group(2) or 1), int(m.group(3) or len(lines))
        return "\n".join(lines[start - 1 : end])

    return SNIPPET.sub(include, path.read_text())


def _numbers(text: str) -> set[str]:
    return {n.replace("−", "-") for n in NUMBER.findall(text)}


def _key_figures(markdown: str) -> list[dict[str, str]]:
    """The rows of the page's "Key figures" table, each ``{column: cell}``."""
    section = markdown.split("\n## Key figures\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(header, row, strict=True)) for row in rows[1:]]  # rows[0]: |---|


def _paragraphs(markdown: str) -> list[list[str]]:
    """Runs of prose lines; code blocks, tables and headings left out, each list item a
    paragraph of its own."""
    paragraphs: list[list[str]] = []
    current: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        prose = bool(line.strip()) and not fenced and not line.startswith(("```", "|", "#"))
        if current and (not prose or re.match(r"\s*([-*]|\d+\.) ", line)):
            paragraphs.append(current)
            current = []
        if prose:
            current.append(line)
    return [*paragraphs, current] if current else paragraphs


def test_readme_key_figures_are_those_of_the_results_pages():
    rows = _key_figures(README.read_text())
    assert len(rows) >= 5
    for row in rows:
        # a results page, or the performance page (speeds, dated per section)
        (page,) = re.findall(r"\]\((docs/(?:results/)?[\w.-]+\.md)(?:#[\w-]+)?\)", row["page"])
        assert DATE.fullmatch(row["measured"].split(", ")[-1]), row
        figures = _numbers(row["figure"])
        missing = figures - _numbers(_page_text(ROOT / page))
        assert figures and not missing, f"{row['what']}: {sorted(missing)} not in {page}"


def test_docs_home_shows_the_readme_key_figures():
    readme = _key_figures(README.read_text())
    home = _key_figures(DOCS_HOME.read_text())
    assert home == [{**row, "page": row["page"].replace("](docs/", "](")} for row in readme]


def test_docs_home_paragraphs_are_short():
    assert [len(p) for p in _paragraphs("a\nb\n\n- c\n  d\n- e\n\n```\nf\n```\n|g|")] == [2, 2, 1]
    paragraphs = _paragraphs(DOCS_HOME.read_text())
    assert paragraphs
    assert [p[0] for p in paragraphs if len(p) > HOME_MAX_PARAGRAPH_LINES] == []


@pytest.mark.parametrize("page", sorted(RESULTS.glob("*.md")), ids=lambda p: p.name)
def test_results_page_opens_with_a_dated_summary(page):
    title, summary, *_ = page.read_text().split("\n\n")
    assert title.startswith("# ") and "\n" not in title
    assert summary.startswith("**Summary.**")
    assert len(summary.splitlines()) <= SUMMARY_MAX_LINES
    assert DATE.search(summary)
