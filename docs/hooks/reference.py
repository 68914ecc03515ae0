"""MkDocs hook: the configuration reference, generated at build time, and a check that the
API reference lists every public module.

The configuration reference is built from the config dataclasses themselves
(:class:`serl_jax.config.Config` and the class behind each of its sections): every key the
loader accepts, with the type its dataclass annotates, the built-in default (what
``configs/default.yaml`` holds) and the description from the class's ``Attributes:``
docstring section. A page asks for it with the line ``<!-- config-reference -->``. A key
without a description, or a public module of ``serl_jax`` or ``llm`` that no ``::: module``
directive under ``docs/api/`` renders, is a warning, so ``mkdocs build --strict`` fails on
either.

The functions here need neither MkDocs nor a built site: ``tests/test_docs.py`` calls them
directly.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
API_DIR = ROOT / "docs" / "api"
PACKAGES = ("serl_jax", "llm")
MARKER = "<!-- config-reference -->"

# Google-style section titles that end an Attributes: section written at the docstring's
# own indentation (a few config classes start their docstring with "Attributes:").
_SECTION_TITLES = {
    "Args",
    "Arguments",
    "Attributes",
    "Example",
    "Examples",
    "Note",
    "Notes",
    "Raises",
    "Returns",
    "See Also",
    "Warning",
    "Warnings",
    "Yields",
}
_ENTRY = re.compile(r"^([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?:\([^)]*\))?\s*:(?:\s+(.*))?$")
_ROLE = re.compile(r":(?:class|func|mod|data|attr|meth|obj|exc):`(~?)([^`]+)`")

log = logging.getLogger("mkdocs.hooks.reference")


class ConfigKey(NamedTuple):
    """One key of the run configuration.

    Attributes:
        section: the config section (``run``, ``env``, ``ppo``, ...).
        key: the key within its section.
        type: the annotation of the dataclass field behind the key.
        default: the built-in default, as the YAML presets write it.
        description: the field's entry in its class's ``Attributes:`` docstring section.
        owner: the dotted path of the class that defines the key.
    """

    section: str
    key: str
    type: str
    default: Any
    description: str
    owner: str

    @property
    def name(self) -> str:
        """``section.key``, as a command-line override names it."""
        return f"{self.section}.{self.key}"


def attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a class's Google-style docstring as ``{name: text}``.

    An entry may name several fields at once (``train, val: fractions of ...``); each of
    them gets the entry's text. Continuation lines are joined with single spaces.
    """
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return {}
    entries: list[tuple[list[str], list[str]]] = []
    indent = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent or (depth == indent and line.strip().rstrip(":") in _SECTION_TITLES):
            break
        match = _ENTRY.match(line.strip()) if depth == indent else None
        if match:
            names = [n.strip() for n in match.group(1).split(",")]
            entries.append((names, [match.group(2) or ""]))
        elif entries:
            entries[-1][1].append(line.strip())
    return {
        name: " ".join(part for part in text if part).strip()
        for names, text in entries
        for name in names
    }


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", str(annotation))


def section_classes() -> dict[str, type]:
    """Each config section's dataclass: the field type of :class:`serl_jax.config.Config`,
    and :class:`serl_jax.envs.execution.EnvParams` for ``env`` (a mapping of its fields)."""
    from serl_jax.config import Config
    from serl_jax.envs.execution import EnvParams

    config = Config()
    out = {}
    for field in dataclasses.fields(Config):
        value = getattr(config, field.name)
        out[field.name] = type(value) if dataclasses.is_dataclass(value) else EnvParams
    return out


def config_keys() -> list[ConfigKey]:
    """Every key of the run configuration, in the order of ``Config.to_dict()``."""
    from serl_jax.config import Config

    classes = section_classes()
    keys = []
    for section, values in Config().to_dict().items():
        cls = classes[section]
        docs = attribute_docs(cls)
        types = {f.name: _type_name(f.type) for f in dataclasses.fields(cls)}
        owner = f"{cls.__module__}.{cls.__qualname__}"
        for key, default in values.items():
            keys.append(
                ConfigKey(section, key, types.get(key, ""), default, docs.get(key, ""), owner)
            )
    return keys


def _yaml(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def _markdown(text: str) -> str:
    """Docstring text as table-cell Markdown: reST roles and double backticks to code spans,
    pipes outside code escaped."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}`", text)
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _summary(cls: type) -> str:
    """The class docstring's text before its ``Attributes:`` section, on one line."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    head = doc.split("Attributes:", 1)[0]
    return " ".join(head.split())


def config_reference_markdown(heading_level: int = 2) -> str:
    """The configuration reference: per section a table of key, type, default and
    description, with a link to the section's class in the API reference."""
    hashes = "#" * heading_level
    out = []
    keys = config_keys()
    classes = section_classes()
    for section, cls in classes.items():
        rows = [k for k in keys if k.section == section]
        owner = rows[0].owner
        out.append(f"{hashes} `{section}` {{#{section}}}\n")
        summary = _markdown(_summary(cls))
        link = f"[`{owner.rsplit('.', 1)[-1]}`][{owner}]"
        out.append(f"{summary + ' ' if summary else ''}Keys documented on {link}.\n")
        out.append("| key | type | default | description |")
        out.append("|---|---|---|---|")
        for k in rows:
            default = _yaml(k.default).replace("|", "\\|")
            out.append(f"| `{k.name}` | `{k.type}` | `{default}` | {_markdown(k.description)} |")
        out.append("")
    return "\n".join(out)


def public_modules(root: Path = ROOT) -> list[str]:
    """The dotted names of the public modules and packages of ``serl_jax`` and ``llm``
    (no path component starting with an underscore, ``__init__`` standing for its
    package)."""
    names = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(part.startswith("_") for part in parts):
                continue
            names.append(".".join(parts))
    return names


def documented_modules(api_dir: Path = API_DIR) -> set[str]:
    """The objects that ``::: name`` directives under ``api_dir`` render."""
    pattern = re.compile(r"^:::\s+([\w.]+)", re.MULTILINE)
    return {m for page in api_dir.rglob("*.md") for m in pattern.findall(page.read_text())}


def missing_api_modules(root: Path = ROOT, api_dir: Path = API_DIR) -> list[str]:
    """Public modules that the API reference does not render."""
    documented = documented_modules(api_dir)
    return [m for m in public_modules(root) if m not in documented]


# MkDocs events ----------------------------------------------------------------------------


def on_config(config, **kwargs):
    for module in missing_api_modules():
        log.warning(f"API reference: no '::: {module}' directive under docs/api/")
    for key in config_keys():
        if not key.description:
            log.warning(f"configuration reference: {key.name} has no description in {key.owner}")
    return config


def on_page_markdown(markdown, page=None, **kwargs):
    if MARKER in markdown:
        return markdown.replace(MARKER, config_reference_markdown(heading_level=3))
    return markdown
