"""The program database of a FunSearch-style search: islands of scored programs.

FunSearch (Romera-Paredes et al. 2024, Nature) keeps its programs on separate islands that
evolve independently (a prompt shows programs of one island only), so that one early good
program does not take over the whole search; every so often the worst half of the islands
is wiped and re-seeded with the best program of a surviving island.

:class:`ProgramDatabase` holds, per island and per module (the slot: ``reward``,
``network``, ...), the best ``capacity`` programs by score (bps, higher is better):

- **Ranking**: a module's programs in ascending score (best last), ties in insertion order
  (of two programs with the same score the later one ranks higher). The list's order is
  the ranking everywhere: the worst is the first, the best the last, and rank 0 (the best)
  is the last.
- **Duplicates**: two programs with the same canonical program
  (:func:`serl_jax.loop.novelty.canonical_program`: equal up to the names they bind,
  comments, docstrings and layout) are one program; an island keeps one of them per
  module, the higher score (on a tie, the one it had first).
- **Best-shot sampling** (:meth:`ProgramDatabase.shots`): programs are drawn without
  replacement with probability proportional to ``1 / (rank + 1)``, so better programs
  are shown more often while others stay in view.
- **Reset** (:meth:`ProgramDatabase.reset`): the worst islands by their best score are
  emptied and each re-seeded with the best program per module of a surviving island.

Everything is a function of the sequence of calls and of the ``random.Random`` passed in
(no hash order, no global RNG): a resumed run rebuilds the database by replaying the same
adds and resets with the same seeds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from serl_jax.loop.novelty import canonical_program

__all__ = ["Program", "ProgramDatabase"]


@dataclass(frozen=True)
class Program:
    """A scored program of one module.

    Attributes:
        candidate_id: the candidate's id (``j2-c1``).
        module: the slot it fills (``reward``, ``network``, ...).
        code: its source.
        score: its validation score (``loop.score``), bps; higher is better.
    """

    candidate_id: str
    module: str
    code: str
    score: float


@dataclass(frozen=True)
class _Entry:
    program: Program
    canonical: str


class ProgramDatabase:
    """Islands of programs, the best ``capacity`` per module per island (module docstring).

    Args:
        num_islands: number of islands (>= 1).
        capacity: most programs kept per module per island (>= 1).

    Raises:
        ValueError: ``num_islands`` or ``capacity`` is not an integer >= 1 (one line naming
            the argument).
    """

    def __init__(self, num_islands: int, capacity: int):
        _check_count("num_islands", num_islands)
        _check_count("capacity", capacity)
        self.num_islands = num_islands
        self.capacity = capacity
        # per island: module -> entries in ranking order (ascending score, best last);
        # dicts keep insertion order, so iteration never depends on hashing
        self._islands: list[dict[str, list[_Entry]]] = [{} for _ in range(num_islands)]

    # ------------------------------------------------------------------ adding

    def add(self, island: int, program: Program) -> bool:
        """Offers a program to an island.

        Args:
            island: the island's index, in ``[0, num_islands)``.
            program: the program; its ``module`` selects the list it competes in.

        Returns:
            Whether it was kept: ``False`` for a non-finite score, for a canonical
            duplicate of a program the island has for that module with a score at least as
            high (a lower-scoring duplicate is replaced), and for a full list whose worst
            program scores higher.

        Raises:
            ValueError: bad ``island`` index.
        """
        self._check_island(island)
        if not math.isfinite(program.score):
            return False
        entry = _Entry(program, canonical_program(program.code))
        entries = self._islands[island].setdefault(program.module, [])
        for i, old in enumerate(entries):
            if old.canonical == entry.canonical:
                if old.program.score >= program.score:
                    return False
                del entries[i]
                break
        if len(entries) >= self.capacity and program.score < entries[0].program.score:
            return False
        # after every program of a score <= its own: ties rank the later one higher
        at = len(entries)
        while at > 0 and entries[at - 1].program.score > program.score:
            at -= 1
        entries.insert(at, entry)
        if len(entries) > self.capacity:
            del entries[0]
        return True

    # ------------------------------------------------------------------ reading

    def programs(self, island: int, module: str) -> list[Program]:
        """An island's programs of one module, ascending score (best last), ties in
        insertion order.

        Args:
            island: the island's index.
            module: the slot.

        Returns:
            The programs (empty when the island has none for ``module``).

        Raises:
            ValueError: bad ``island`` index.
        """
        self._check_island(island)
        return [e.program for e in self._islands[island].get(module, [])]

    def modules(self, island: int) -> list[str]:
        """The modules an island holds programs of, in the order they first came.

        Raises:
            ValueError: bad ``island`` index.
        """
        self._check_island(island)
        return [m for m, entries in self._islands[island].items() if entries]

    def best(self, island: int) -> Program | None:
        """An island's best program over all modules (``None`` when it is empty); of equal
        scores, the first module's.

        Raises:
            ValueError: bad ``island`` index.
        """
        self._check_island(island)
        best = None
        for entries in self._islands[island].values():
            if entries and (best is None or entries[-1].program.score > best.score):
                best = entries[-1].program
        return best

    def best_score(self, island: int) -> float:
        """The score of :meth:`best` in bps, ``-inf`` when the island is empty.

        Raises:
            ValueError: bad ``island`` index.
        """
        best = self.best(island)
        return -math.inf if best is None else best.score

    def shots(
        self, island: int, module: str, k: int, rng: random.Random, unlike: str | None = None
    ) -> list[Program]:
        """Draws the programs to show in a prompt (best-shot prompting).

        ``min(k, available)`` distinct programs of the island's ``module`` are drawn one at
        a time without replacement, each with probability proportional to ``1 / (rank +
        1)`` among those left (rank 0 the best).

        Args:
            island: the island's index.
            module: the slot.
            k: how many to draw (>= 0).
            rng: the source of randomness (one ``rng.random()`` per draw).
            unlike: a program's code: the island's programs canonically equal to it
                (:func:`~serl_jax.loop.novelty.canonical_program`) are left out, ranks
                counted among the others.

        Returns:
            The drawn programs in ascending score order (best last); empty when the island
            has none for ``module``.

        Raises:
            ValueError: bad ``island`` index or ``k < 0``.
        """
        self._check_island(island)
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"k: expected an integer >= 0, got {k!r}")
        entries = self._islands[island].get(module, [])
        if unlike is not None:
            twin = canonical_program(unlike)
            entries = [e for e in entries if e.canonical != twin]
        n = len(entries)
        left = list(range(n))  # positions in ranking order; rank = n - 1 - position
        drawn = []
        for _ in range(min(k, n)):
            weights = [1.0 / (n - p) for p in left]
            u = rng.random() * sum(weights)
            pick = len(left) - 1  # guards against rounding at the top of the range
            for i, w in enumerate(weights):
                u -= w
                if u < 0:
                    pick = i
                    break
            drawn.append(left.pop(pick))
        return [entries[p].program for p in sorted(drawn)]

    # ------------------------------------------------------------------ reset

    def reset(self, rng: random.Random, fraction: float = 0.5) -> list[int]:
        """FunSearch's island reset.

        The worst ``floor(num_islands * fraction)`` islands by :meth:`best_score` (of equal
        scores, the higher index is worse), but always at least one survivor, are emptied;
        each, in ascending index order, is re-seeded with the best program per module of a
        surviving island drawn uniformly (``rng.randrange``). With one island nothing is
        reset.

        Args:
            rng: the source of randomness.
            fraction: the share of islands to reset, in [0, 1].

        Returns:
            The reset islands' indices, ascending.

        Raises:
            ValueError: ``fraction`` outside [0, 1].
        """
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction: expected a number in [0, 1], got {fraction!r}")
        count = min(math.floor(self.num_islands * fraction), self.num_islands - 1)
        if count <= 0:
            return []
        ranked = sorted(range(self.num_islands), key=lambda i: (self.best_score(i), -i))
        reset = sorted(ranked[:count])
        survivors = sorted(ranked[count:])
        for island in reset:
            donor = self._islands[survivors[rng.randrange(len(survivors))]]
            self._islands[island] = {m: [entries[-1]] for m, entries in donor.items() if entries}
        return reset

    # ------------------------------------------------------------------ reports

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable snapshot for reports.

        Returns:
            ``{"num_islands", "capacity", "islands": [{module: [{"candidate_id",
            "score"}, ...]}, ...]}``, each module's list in ascending score (best last).
        """
        return {
            "num_islands": self.num_islands,
            "capacity": self.capacity,
            "islands": [
                {
                    module: [
                        {"candidate_id": e.program.candidate_id, "score": e.program.score}
                        for e in entries
                    ]
                    for module, entries in island.items()
                    if entries
                }
                for island in self._islands
            ],
        }

    def _check_island(self, island: int) -> None:
        if isinstance(island, bool) or not isinstance(island, int):
            raise ValueError(f"island: expected an integer index, got {island!r}")
        if not 0 <= island < self.num_islands:
            raise ValueError(f"island: expected an index in [0, {self.num_islands}), got {island}")


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
