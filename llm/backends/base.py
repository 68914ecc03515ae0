"""The backend interface, its error type and the ``--llm`` spec grammar.

A backend turns prompts into completions (code text, usually inside a fenced block; see
:func:`llm.parsing.extract_code`). Every backend implements one method::

    backend = make_backend("openai:http://localhost:8000/v1", model="qwen2.5-coder")
    completions = backend.generate(["Write a reward function ..."], n=4)
    # -> [[c0, c1, c2, c3]]: one list of n completions per prompt

Spec grammar (:func:`make_backend`):

- ``scripted:<file.json>``: canned completions for tests (:class:`ScriptedBackend`).
- ``openai:<base_url>``: any OpenAI-compatible server (:class:`OpenAIBackend`).
- ``offline``: the offline designer, a program-library sampler and mutator, not a language
  model (:class:`llm.backends.offline.OfflineDesigner`); the default when no model is given.
- ``hf:<path or name>``: a local transformers causal LM (:class:`llm.backends.hf.HFBackend`;
  needs the ``llm`` extra: torch, transformers).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

__all__ = ["Backend", "BackendError", "make_backend"]

SPEC_HELP = "scripted:<file.json> | openai:<base_url> | offline | hf:<path or name>"


class BackendError(RuntimeError):
    """A backend could not produce completions (unreachable server, bad answer, bad spec).

    The message is one line and names the backend (and the server URL where there is one).
    """


def check_generate_args(
    prompts: Sequence[str], n: int, temperature: float, max_new_tokens: int
) -> tuple[list[str], int, float, int]:
    """Checks the arguments of :meth:`Backend.generate` (and of variants such as
    ``HFBackend.generate_with_logprobs``); returns them as ``list``, ``int``, ``float``,
    ``int``.

    Raises:
        TypeError: ``prompts`` is a string or holds a non-string.
        ValueError: ``n``, ``temperature`` or ``max_new_tokens`` out of range.
    """
    if isinstance(prompts, str | bytes):
        raise TypeError("prompts must be a sequence of strings, not a single string")
    prompts = list(prompts)
    for p in prompts:
        if not isinstance(p, str):
            raise TypeError(f"prompts must be strings, got {type(p).__name__}")
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    return prompts, int(n), float(temperature), int(max_new_tokens)


class Backend(ABC):
    """Turns prompts into code completions.

    Subclasses implement :meth:`_generate`; :meth:`generate` checks the arguments first,
    so implementations can rely on a non-empty ``list[str]``, ``n >= 1``,
    ``temperature >= 0`` and ``max_new_tokens >= 1``.
    """

    #: Short name used in messages and run records (``"scripted"``, ``"openai"``, ...).
    name: str = "backend"

    def generate(
        self,
        prompts: Sequence[str],
        n: int = 1,
        temperature: float = 0.8,
        max_new_tokens: int = 1024,
    ) -> list[list[str]]:
        """Samples ``n`` completions for each prompt.

        Args:
            prompts: the prompts (user messages), one request each; a single string is
                refused (wrap it in a list).
            n: completions per prompt (>= 1).
            temperature: sampling temperature (>= 0).
            max_new_tokens: the most tokens per completion (>= 1).

        Returns:
            ``len(prompts)`` lists of ``n`` completion strings, in prompt order.

        Raises:
            TypeError: ``prompts`` is a string or holds a non-string.
            ValueError: ``n``, ``temperature`` or ``max_new_tokens`` out of range.
            BackendError: the backend failed (see the implementation).
        """
        prompts, n, temperature, max_new_tokens = check_generate_args(
            prompts, n, temperature, max_new_tokens
        )
        if not prompts:
            return []
        out = self._generate(prompts, n, temperature, max_new_tokens)
        if len(out) != len(prompts) or any(len(c) != n for c in out):
            raise BackendError(f"{self.name} backend returned the wrong number of completions")
        return out

    @abstractmethod
    def _generate(
        self, prompts: list[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        """Implementation of :meth:`generate` on already-checked arguments."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Releases resources (connections); the default does nothing."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        BackendError: unknown or malformed spec, an option the backend does not take, a
            or a missing dependency.
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
