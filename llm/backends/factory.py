"""Backends by name: the ``--llm`` spec grammar and :func:`make_backend`.

This module sits above the backend implementations, which import only
:mod:`llm.backends.base`; each one is imported here when its spec is used, so building the
offline designer imports neither ``openai`` nor torch.

Spec grammar (:func:`make_backend`):

- ``scripted:<file.json>``: canned completions for tests
  (:class:`llm.backends.scripted.ScriptedBackend`).
- ``openai:<base_url>``: any OpenAI-compatible server
  (:class:`llm.backends.openai_backend.OpenAIBackend`).
- ``offline``: the offline designer, a program-library sampler and mutator, not a language
  model (:class:`llm.backends.offline.OfflineDesigner`); the default when no model is given.
- ``hf:<path or name>``: a local transformers causal LM (:class:`llm.backends.hf.HFBackend`;
  a name of :data:`llm.models.CATALOG`, such as ``hf:qwen2.5-coder-1.5b``, is its installed
  file;
  needs the ``llm`` extra: torch, transformers).
"""

from __future__ import annotations

import inspect
from typing import Any

from llm.backends.base import Backend, BackendError

__all__ = ["SPEC_HELP", "make_backend"]

SPEC_HELP = "scripted:<file.json> | openai:<base_url> | offline | hf:<path or name>"


def _construct(name: str, factory: Any, arg: Any, options: dict[str, Any]) -> Backend:
    """Calls ``factory(arg, **options)`` (``factory(**options)`` when ``arg`` is None),
    turning unknown options into a BackendError."""
    args = () if arg is None else (arg,)
    try:
        inspect.signature(factory).bind(*args, **options)
    except TypeError as e:
        raise BackendError(f"bad options for the {name} backend: {e}") from None
    return factory(*args, **options)


def make_backend(spec: str, **options: Any) -> Backend:
    """Builds a backend from a ``--llm`` spec string.

    Args:
        spec: ``scripted:<file.json>``, ``openai:<base_url>``, ``offline`` or
            ``hf:<path or name>``.
        **options: keyword arguments for the backend's constructor (e.g. ``model``,
            ``api_key``, ``timeout``, ``max_retries``, ``backoff`` for ``openai``;
            ``cycle`` for ``scripted``; ``seed`` for ``offline``; ``device``, ``dtype``
            for ``hf``).

    Returns:
        The backend.

    Raises:
        BackendError: unknown or malformed spec, an option the backend does not take, or a
            missing dependency.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise BackendError(f"empty LLM backend spec; expected {SPEC_HELP}")
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    kind = kind.lower()
    if kind == "offline":
        if arg:
            raise BackendError(f"LLM backend spec {spec!r}: 'offline' takes no value")
        from llm.backends.offline import OfflineDesigner

        return _construct("offline", OfflineDesigner, None, options)
    if kind in ("scripted", "openai", "hf") and not (sep and arg.strip()):
        raise BackendError(f"LLM backend spec {spec!r} needs a value after '{kind}:'")
    if kind == "scripted":
        from llm.backends.scripted import ScriptedBackend

        return _construct("scripted", ScriptedBackend.from_json, arg.strip(), options)
    if kind == "openai":
        try:
            from llm.backends.openai_backend import OpenAIBackend
        except ImportError as e:
            raise BackendError(
                f"the openai backend needs the 'openai' package ({e}); "
                "install it with pip install -e '.[llm]'"
            ) from None
        return _construct("openai", OpenAIBackend, arg.strip(), options)
    if kind == "hf":
        try:
            from llm.backends.hf import HFBackend
        except ImportError as e:
            raise BackendError(
                f"the hf backend needs torch and transformers ({e}); "
                "install them with pip install -e '.[llm]'"
            ) from None
        return _construct("hf", HFBackend, arg.strip(), options)
    raise BackendError(f"unknown LLM backend spec {spec!r}; expected {SPEC_HELP}")
