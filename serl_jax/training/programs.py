"""The validated programs a config names (``imagine.program``, ``marl.profile``,
``marl.communication``): a library program of the offline designer or a ``.py`` file, run
through both validation stages in the sandbox before it is defined in this process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm.designs import program_source
from llm.validate import load_validated, validate
from serl_jax.config import Config

__all__ = ["imagination_program", "validated_program"]


def validated_program(
    spec: str, kind: str, setting: str, **checks: Any
) -> tuple[str, Callable | None]:
    """The validated program a config key names: ``(source code, entry point)``, or
    ``("", None)`` when ``spec`` is empty.

    The program is a name of the offline designer's library for ``kind``
    (:func:`llm.designs.library`) or a path to a ``.py`` file; it runs through both
    validation stages (in the sandbox) before it is defined in this process.

    Args:
        spec: the key's value.
        kind: the slot (``"imagination"``, ``"profiling"``).
        setting: the key's name, for messages (``imagine.program``).
        checks: passed to :func:`llm.validate.validate` (e.g. ``bounds``).

    Raises:
        ValueError: unknown name or unreadable file, or a program that validation rejects
            (naming the stage and the reason).
        SandboxError: the sandbox itself failed.
    """
    code = program_source(spec, kind, setting)
    if not code:
        return "", None
    verdict = validate(code, kind, **checks)
    if not verdict.ok:
        raise ValueError(f"{setting} {spec}: rejected at stage {verdict.stage}: {verdict.reason}")
    return code, load_validated(code, kind)


def imagination_program(cfg: Config) -> tuple[str, Callable | None]:
    """The validated program of ``cfg.imagine.program`` (:func:`validated_program`,
    checked with ``cfg.imagine``'s bounds)."""
    return validated_program(
        cfg.imagine.program, "imagination", "imagine.program", bounds=cfg.imagine.bounds()
    )
