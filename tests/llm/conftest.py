"""Fixtures of the LLM tests: tiny offline model folders (see ``tests/llm/tiny_lm.py``).

torch is imported only when a test asks for one of these fixtures; tests that need torch
should ``pytest.importorskip("torch")`` first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def _build_tiny_lm():
    """``tiny_lm.build_tiny_lm``, importable whatever pytest's import mode."""
    try:
        from tiny_lm import build_tiny_lm  # pytest's default mode puts tests/llm on sys.path
    except ModuleNotFoundError:
        sys.path.insert(0, str(Path(__file__).parent))
        from tiny_lm import build_tiny_lm
    return build_tiny_lm


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    """A tiny random Llama + byte-level BPE tokenizer folder (no chat template), for
    ``make_backend(f"hf:{tiny_lm_dir}")``; built once per session, do not modify it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return _build_tiny_lm()(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="session")
def tiny_chat_lm_dir(tmp_path_factory):
    """The same tiny model with a chat template on its tokenizer."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return _build_tiny_lm()(tmp_path_factory.mktemp("tiny_chat_lm"), chat_template=True)
