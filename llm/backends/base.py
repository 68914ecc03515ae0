"""The backend interface and its error type.

A backend turns prompts into completions (code text, usually inside a fenced block; see
:func:`llm.parsing.extract_code`). Every backend implements one method::

    backend = make_backend("openai:http://localhost:8000/v1", model="qwen2.5-coder")  # factory
    completions = backend.generate(["Write a reward function ..."], n=4)
    # -> [[c0, c1, c2, c3]]: one list of n completions per prompt
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

__all__ = ["Backend", "BackendError", "check_generate_args"]


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

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` in the model's tokenizer, for throughput in the run log;
        ``None`` (the default) for a backend without one."""
        del text
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Releases resources (connections); the default does nothing."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
