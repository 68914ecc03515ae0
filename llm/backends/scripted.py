"""A scripted backend for tests: canned completions, every prompt recorded.

Two forms::

    # a queue: completions are handed out in order, n per prompt, prompts in order
    backend = ScriptedBackend(["```python\\ndef reward(...): ...\\n```", "not code"])

    # keyed queues: each prompt takes from the first key that occurs in it ("" matches all)
    backend = ScriptedBackend({"LLM4Reward": [reward_a, reward_b], "LLM4Agent": [net_a]})

When a queue runs out, :meth:`ScriptedBackend.generate` raises :class:`BackendError`
(so a test notices a loop asking for more than it scripted), unless ``cycle=True``, in which
case the queue starts again from its first completion. ``backend.prompts`` lists every
prompt received, in order, so a test can assert that error text was fed back.

JSON files (the ``scripted:<file.json>`` spec) hold either a list of strings or an object
``{"completions": <list or object of lists>, "cycle": false}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llm.backends.base import Backend, BackendError

__all__ = ["ScriptedBackend"]


def _as_queue(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        if not value:
            raise BackendError(f"scripted backend: {where} has no completions")
        return list(value)
    raise BackendError(f"scripted backend: {where} must be a string or a list of strings")


class ScriptedBackend(Backend):
    """Returns canned completions in order and records the prompts it receives.

    Args:
        completions: a sequence of completion strings (one queue for all prompts), or a
            mapping from a substring of the prompt to a string or list of strings (one
            queue per key; a prompt uses the first key, in mapping order, that it
            contains; the key ``""`` matches every prompt).
        cycle: start a queue again from the beginning when it runs out, instead of
            raising :class:`BackendError`.

    Attributes:
        prompts: every prompt received, in order (one entry per prompt, not per sample).
        calls: one dict per :meth:`generate` call with ``prompts``, ``n``, ``temperature``
            and ``max_new_tokens``.

    Raises:
        BackendError: empty or malformed completions.
    """

    name = "scripted"

    def __init__(
        self, completions: Sequence[str] | Mapping[str, str | Sequence[str]], *, cycle: bool = False
    ) -> None:
        if isinstance(completions, Mapping):
            if not completions:
                raise BackendError("scripted backend: no completions given")
            self._queues = {str(k): _as_queue(v, f"key {k!r}") for k, v in completions.items()}
            self._keyed = True
        else:
            self._queues = {"": _as_queue(completions, "the completion list")}
            self._keyed = False
        self._next = dict.fromkeys(self._queues, 0)
        self.cycle = bool(cycle)
        self.prompts: list[str] = []
        self.calls: list[dict[str, Any]] = []

    @classmethod
    def from_json(cls, path: str | Path, *, cycle: bool | None = None) -> ScriptedBackend:
        """Loads canned completions from a JSON file.

        Args:
            path: a file holding a list of strings, or an object
                ``{"completions": <list or object>, "cycle": <bool, optional>}``.
            cycle: overrides the file's ``cycle`` when given.

        Returns:
            The backend.

        Raises:
            BackendError: the file is missing, not JSON, or of the wrong shape.
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise BackendError(f"scripted backend: cannot read {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise BackendError(f"scripted backend: {path} is not valid JSON ({e})") from None
        file_cycle = False
        if isinstance(data, dict):
            if "completions" not in data or not set(data) <= {"completions", "cycle"}:
                raise BackendError(
                    f"scripted backend: {path} must hold a list of strings or an object "
                    'with keys "completions" and optionally "cycle"'
                )
            file_cycle = bool(data.get("cycle", False))
            data = data["completions"]
        if not isinstance(data, list | dict):
            raise BackendError(f"scripted backend: completions in {path} must be a list or object")
        return cls(data, cycle=file_cycle if cycle is None else cycle)

    @property
    def remaining(self) -> int:
        """Completions left before a queue runs out (over all queues; ignores ``cycle``)."""
        return sum(len(q) - self._next[k] for k, q in self._queues.items())

    def _key_for(self, prompt: str) -> str:
        if not self._keyed:
            return ""
        for key in self._queues:
            if key in prompt:
                return key
        raise BackendError(f"scripted backend: no scripted key occurs in prompt {prompt[:60]!r}...")

    def _take(self, key: str) -> str:
        queue, i = self._queues[key], self._next[key]
        if i >= len(queue):
            if not self.cycle:
                where = f" for key {key!r}" if self._keyed else ""
                raise BackendError(
                    f"scripted backend exhausted{where} after {len(queue)} completions"
                )
            i = 0
        self._next[key] = i + 1
        return queue[i]

    def _generate(
        self, prompts: list[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        self.calls.append(
            {
                "prompts": list(prompts),
                "n": n,
                "temperature": temperature,
                "max_new_tokens": max_new_tokens,
            }
        )
        self.prompts.extend(prompts)
        return [[self._take(self._key_for(p)) for _ in range(n)] for p in prompts]
