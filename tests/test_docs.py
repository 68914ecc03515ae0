"""The documentation cannot drift: the generated configuration reference covers every
configuration key, the API reference renders every public module, and the README stays
a front door (CI also runs ``mkdocs build --strict``; these checks need no MkDocs)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

from serl_jax.config import Config

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250


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
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    # .ci/run runs the README's install and test commands.
    assert 'pip install -e ".[dev]" && python -m serl_jax.train' in readme
    for page in ("docs/getting-started.md", "docs/results/index.md", "docs/results/benchmark.md"):
        assert f"({page}" in readme and (ROOT / page).is_file()
