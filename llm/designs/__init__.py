"""The curated program library of the offline designer (:mod:`llm.backends.offline`).

Hand-written reward and network programs for the execution task, kept as source text:
the designer samples them, perturbs their constants and recombines their reward terms,
and never executes them itself (they run only after :func:`llm.validate.validate`, like
any model-written candidate).

- :data:`llm.designs.rewards.REWARDS`: reward programs in the dict-of-terms form
  (:mod:`serl_jax.components.reward`), units bps times ``params.reward_scale``.
- :data:`llm.designs.rewards.REWARD_TERMS`: the term pool the designer adds to rewards.
- :data:`llm.designs.networks.NETWORKS`: actor-critic ``Network`` modules.
- :data:`llm.designs.imaginations.IMAGINATIONS`: ``imagine`` programs that turn a real
  training day into a new one (LLM4Imagine).
- :data:`llm.designs.profiles.PROFILES`: ``profile`` programs that give each agent of the
  multi-agent market its parent order (LLM4Profiling).
- :data:`llm.designs.communications.COMMUNICATIONS`: ``Communication`` modules, what an
  agent tells the others (LLM4Communication).

Conventions the designer's mutations rely on (documented so new programs follow them):

- Tunable constants are module-level ``UPPER_CASE = <number>`` assignments (rewards,
  imaginations, profiles: a float named ``*SHARE*`` or ``*FRACTION*`` stays in (0, 1]) or
  numeric field defaults of ``class Network`` (networks: widths are ints, depths are int
  fields whose name contains ``depth``, ``layers`` or ``blocks``) and of
  ``class Communication`` (``message_size`` an int in [1, 16], widths ints). A constant
  read inside a subscript (``obs[..., :PRIVATE]``) describes the observation's layout
  and is never moved.
- A reward returns one dict literal at the end of ``reward`` (the terms); helper
  variables of a pool term are prefixed with the term's name.
- The program starts with a comment ``# <name>: <what it does>`` (may wrap onto more
  comment lines).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Design", "RewardTerm", "library", "program_source", "reward_terms"]


@dataclass(frozen=True)
class Design:
    """One library program.

    Attributes:
        name: short identifier (``pa_penalty``).
        kind: the slot, ``"reward"``, ``"network"``, ``"imagination"``, ``"profiling"``
            or ``"communication"`` (the validator's ``kind``).
        code: the program's source (it starts with the comment ``# <name>: <summary>``).
    """

    name: str
    kind: str
    code: str

    @property
    def summary(self) -> str:
        """The program's description: its leading comment lines joined, without the name."""
        lines = []
        for line in self.code.split("\n"):
            if not line.startswith("#"):
                break
            lines.append(line.lstrip("# ").strip())
        return " ".join(lines).split(": ", 1)[-1]


@dataclass(frozen=True)
class RewardTerm:
    """A reward term the designer can add to a dict-form reward.

    Attributes:
        key: the term's name in the returned dict.
        summary: what it does, one line.
        constants: ``(NAME, literal, comment)`` module-level constants it uses (added when
            the program does not define them yet).
        statements: helper assignments, one per line, unindented; their targets start with
            ``key`` so they do not collide with the program's own names.
        value: the term's expression (float32 scalar, bps times ``params.reward_scale``).

    The code may use ``prev_state``, ``action``, ``next_state``, ``params`` and ``jnp``.
    """

    key: str
    summary: str
    constants: tuple[tuple[str, str, str], ...]
    statements: tuple[str, ...]
    value: str


def library(kind: str) -> tuple[Design, ...]:
    """The library programs for a slot.

    Args:
        kind: ``"reward"``, ``"network"``, ``"imagination"``, ``"profiling"`` or
            ``"communication"``.

    Raises:
        ValueError: unknown kind.
    """
    if kind == "reward":
        from llm.designs.rewards import REWARDS

        return REWARDS
    if kind == "network":
        from llm.designs.networks import NETWORKS

        return NETWORKS
    if kind == "imagination":
        from llm.designs.imaginations import IMAGINATIONS

        return IMAGINATIONS
    if kind == "profiling":
        from llm.designs.profiles import PROFILES

        return PROFILES
    if kind == "communication":
        from llm.designs.communications import COMMUNICATIONS

        return COMMUNICATIONS
    raise ValueError(
        f"no design library for kind {kind!r}; use 'reward', 'network', 'imagination', "
        f"'profiling' or 'communication'"
    )


def program_source(spec: str, kind: str, setting: str) -> str:
    """The source code a config key names: a library program's name for ``kind`` or a
    path to a ``.py`` file ("" for an empty ``spec``). The code is returned, not checked:
    run it through :func:`llm.validate.validate` before it is defined.

    Args:
        spec: the key's value (``staggered_windows``, ``my_profile.py``).
        kind: the slot (``"profiling"``, ...).
        setting: the key's name, for messages (``marl.profile``).

    Raises:
        ValueError: an unknown name or an unreadable file.
    """
    spec = spec.strip()
    if not spec:
        return ""
    designs = {d.name: d.code for d in library(kind)}
    if spec in designs:
        return designs[spec]
    if spec.endswith(".py"):
        try:
            return Path(spec).read_text()
        except OSError as err:
            raise ValueError(f"{setting}: cannot read {spec}: {err.strerror}") from None
    raise ValueError(
        f"{setting}: {spec!r} is neither a library program ({', '.join(designs)}) nor a .py file"
    )


def reward_terms() -> tuple[RewardTerm, ...]:
    """The pool of terms the designer adds to dict-form rewards."""
    from llm.designs.rewards import REWARD_TERMS

    return REWARD_TERMS
