"""The run store of an SE-RL run: SQLite for records, files for artifacts.

Everything is written as it happens, each step in one transaction, so a run killed at
any point can be resumed (:meth:`RunStore.open`) with nothing lost and nothing evaluated
twice: a candidate's status moves ``proposed -> rejected | validated -> evaluated |
crashed`` (in the search, :mod:`serl_jax.loop.search`, ``validated -> screened``, trained
in the short stage, and ``screened -> evaluated | crashed`` for the promoted ones) and
only the unfinished steps are redone. Layout of a run folder::

    <run>/run.sqlite          records (tables below)
    <run>/config.yaml         the configuration (also in the ``meta`` table)
    <run>/candidates/<id>/    checkpoint/ (policy + the slots' codes), curves.npz (evaluated)
    <run>/xla_cache/          JAX's persistent compilation cache (``loop.compilation_cache``)
    <run>/report.md, report.json, results.txt   written when the run finishes

Tables: ``meta(key, value)``; ``prompts(id, iteration, module, purpose, prompt,
completions, result)``; ``candidates`` (one row per candidate: the record of
:class:`Candidate`); ``iterations(iteration, pa, ema, best_id, converged)`` (column ``pa`` holds the
iteration's best score, whatever ``loop.score`` names: the name predates the option);
``dek_updates(iteration, stats, adapter)`` (low-level DEK: one LoRA update per finished
iteration, its adapter folder under ``adapters/``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["Candidate", "IterationSummary", "RunStore", "StoreError"]

STATUSES = ("proposed", "rejected", "validated", "screened", "evaluated", "crashed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS prompts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, iteration INTEGER NOT NULL, module TEXT NOT NULL,
    purpose TEXT NOT NULL, prompt TEXT NOT NULL, completions TEXT NOT NULL,
    result TEXT, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY, iteration INTEGER NOT NULL, idx INTEGER NOT NULL,
    module TEXT NOT NULL, status TEXT NOT NULL, record TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS dek_updates (
    iteration INTEGER PRIMARY KEY, stats TEXT NOT NULL, adapter TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS iterations (
    iteration INTEGER PRIMARY KEY, pa REAL NOT NULL, ema REAL NOT NULL,
    best_id TEXT, converged INTEGER NOT NULL, created REAL NOT NULL);
"""


class StoreError(RuntimeError):
    """A run folder that cannot be created or resumed (one line naming the folder)."""


@dataclass
class Candidate:
    """One candidate program of the outer loop (the design doc's candidate record).

    Attributes:
        id: ``j<iteration>-c<index>`` (``j0-default`` for the reference candidate).
        iteration: outer iteration j (0 for the reference).
        idx: index within the iteration.
        module: the slot that was designed (``reward``, ``network``, ``imagination``,
            ``profiling``, ``communication``; ``default`` for the reference, which uses
            the default implementations).
        status: ``proposed``, ``rejected``, ``validated``, ``evaluated`` or ``crashed``.
        prompt_id: row of the prompt it answers in the ``prompts`` table (None for j0).
        instruction: the instruction it was written under.
        completion: the model's raw completion.
        code: the designed module's code ("" when none could be parsed), after the
            repair pass (:func:`llm.repair.repair`).
        repairs: what the repair pass fixed in the extracted code, one line each.
        reward_code, network_code, imagination_code, profiling_code, communication_code:
            the full program trained: the designed module plus the incumbent (best so
            far) of the other slots (``imagination_code`` "": real training days only;
            with several agents, ``profiling_code`` "": training on the evaluation
            profiles, ``communication_code`` "": no messages).
        parent_ids: candidates whose programs it was built from (the incumbent of the
            other slot; prompts may show more as examples).
        validation: ``{ok, stage, reason}`` of :func:`llm.validate.validate`.
        metrics: validation-day metrics (``pa``, ``wr``, ``glr``, ``afi``, ... bps/ratios).
        reward_term_stats: per reward term statistics (see :mod:`serl_jax.loop.evaluation`).
        error: why it failed (parse, validation or training error), "" if it did not.
        score: the metric ``loop.score`` names (validation shortfall or PA), used for
            ranking, bps (``loop.failure_score`` for a failed candidate).
        duplicate_of: id of an earlier candidate with the same program (not retrained).
        timing: seconds spent: ``validate``, ``compile``, ``train``, ``evaluate``.
        retry_of: the rejected candidate this one answers a debug prompt for
            (self-debugging, ``loop.repair_attempts``); None for a first sample.
        attempt: the self-debugging round that produced it (0: a first sample).
        island: the search's island it was designed for (:mod:`serl_jax.loop.search`);
            None outside the search and for the reference, which seeds every island.
        prompt_kind: the search prompt it answers (``better``, ``form``, ``parameters``,
            ``crossover``; ``library`` for a design-library seed); "" outside the search.
        stages: the search cascade's results per training stage (``short``, ``full``):
            ``{"score": bps or None, "seconds": s}``, with ``"duplicate_of"`` when the
            score was copied from an earlier candidate's (:mod:`serl_jax.loop.cascade`).
    """

    id: str
    iteration: int
    idx: int
    module: str
    status: str = "proposed"
    prompt_id: int | None = None
    instruction: str = ""
    completion: str = ""
    code: str = ""
    repairs: list[str] = field(default_factory=list)
    reward_code: str = ""
    network_code: str = ""
    imagination_code: str = ""
    profiling_code: str = ""
    communication_code: str = ""
    parent_ids: list[str] = field(default_factory=list)
    validation: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    reward_term_stats: dict[str, Any] | None = None
    error: str = ""
    score: float | None = None
    duplicate_of: str | None = None
    timing: dict[str, float] = field(default_factory=dict)
    retry_of: str | None = None
    attempt: int = 0
    island: int | None = None
    prompt_kind: str = ""
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)

    def slot_code(self, kind: str) -> str:
        """The code of slot ``kind`` (``reward``, ``network``, ``imagination``,
        ``profiling``, ``communication``) trained."""
        return getattr(self, f"{kind}_code")

    def to_record(self) -> dict[str, Any]:
        """JSON-serializable dict of every field."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Candidate:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})


@dataclass(frozen=True)
class IterationSummary:
    """The outcome of one finished outer iteration.

    Attributes:
        iteration: j.
        score: the best validation score (``loop.score``) among the iteration's
            candidates, bps.
        ema: the score's moving average after this iteration, bps.
        best_id: the candidate that reached ``score`` (None if all failed).
        converged: the convergence test stopped the loop here.
    """

    iteration: int
    score: float
    ema: float
    best_id: str | None
    converged: bool


class RunStore:
    """Records and artifacts of one SE-RL run folder.

    Use :meth:`create` for a new run and :meth:`open` to resume one.
    """

    def __init__(self, root: Path, connection: sqlite3.Connection):
        self.root = root
        self._db = connection

    @classmethod
    def create(cls, root: str | Path, config: dict[str, Any], config_yaml: str) -> RunStore:
        """Creates a new run folder.

        Raises:
            StoreError: the folder already exists.
        """
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise StoreError(f"{root}: run folder already exists (use --resume)") from None
        (root / "candidates").mkdir()
        (root / "config.yaml").write_text(config_yaml)
        store = cls(root, cls._connect(root))
        store._db.executescript(_SCHEMA)  # executescript commits on its own
        with store._transaction() as db:
            db.execute("INSERT INTO meta VALUES ('config', ?)", (json.dumps(config),))
            db.execute("INSERT INTO meta VALUES ('status', 'running')")
            db.execute("INSERT INTO meta VALUES ('created', ?)", (repr(time.time()),))
        return store

    @classmethod
    def open(cls, root: str | Path) -> RunStore:
        """Opens an existing run folder to resume it.

        Raises:
            StoreError: the folder or its ``run.sqlite`` is missing or unreadable.
        """
        root = Path(root)
        if not (root / "run.sqlite").is_file():
            raise StoreError(f"{root}: not an SE-RL run folder (no run.sqlite)")
        try:
            store = cls(root, cls._connect(root))
            store.meta("config")
        except (sqlite3.DatabaseError, KeyError) as e:
            raise StoreError(f"{root}/run.sqlite: cannot be read ({e})") from None
        return store

    @staticmethod
    def _connect(root: Path) -> sqlite3.Connection:
        db = sqlite3.connect(root / "run.sqlite", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    # -- meta -----------------------------------------------------------------------
    def meta(self, key: str) -> Any:
        """A JSON value of the ``meta`` table (``KeyError`` when absent)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        try:
            return json.loads(row[0])
        except json.JSONDecodeError:
            return row[0]

    def set_meta(self, key: str, value: Any) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    # -- proposals ------------------------------------------------------------------
    def add_proposals(
        self,
        iteration: int,
        prompts: Iterable[tuple[str, str, str, list[str], Any]],
        candidates: Iterable[tuple[int, Candidate]],
    ) -> list[int]:
        """Records one iteration's prompts and the candidates they produced, atomically.

        Args:
            iteration: j.
            prompts: ``(module, purpose, prompt, completions, result)`` rows.
            candidates: ``(prompt_index, candidate)`` with the index of the prompt (in
                ``prompts``) each answers; its ``prompt_id`` is filled in.

        Returns:
            The new prompt row ids.
        """
        now = time.time()
        with self._transaction() as db:
            ids = []
            for module, purpose, prompt, completions, result in prompts:
                cur = db.execute(
                    "INSERT INTO prompts (iteration, module, purpose, prompt, completions, "
                    "result, created) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (iteration, module, purpose, prompt, json.dumps(completions),
                     json.dumps(result), now),
                )  # fmt: skip
                ids.append(int(cur.lastrowid))
            for prompt_index, cand in candidates:
                cand.prompt_id = None if prompt_index is None else ids[prompt_index]
                self._put(db, cand, insert=True)
        return ids

    def prompts(self, iteration: int | None = None) -> list[dict[str, Any]]:
        """Prompt rows (of one iteration if given), in order."""
        query = "SELECT id, iteration, module, purpose, prompt, completions, result FROM prompts"
        args: tuple = ()
        if iteration is not None:
            query += " WHERE iteration = ?"
            args = (iteration,)
        rows = self._db.execute(query + " ORDER BY id", args).fetchall()
        keys = ("id", "iteration", "module", "purpose", "prompt", "completions", "result")
        out = []
        for row in rows:
            item = dict(zip(keys, row, strict=True))
            item["completions"] = json.loads(item["completions"])
            item["result"] = json.loads(item["result"]) if item["result"] else None
            out.append(item)
        return out

    # -- candidates -----------------------------------------------------------------
    def _put(self, db: sqlite3.Connection, cand: Candidate, insert: bool = False) -> None:
        if cand.status not in STATUSES:
            raise ValueError(f"candidate {cand.id}: unknown status {cand.status!r}")
        record = json.dumps(cand.to_record(), allow_nan=False)
        verb = "INSERT" if insert else "REPLACE"
        db.execute(
            f"{verb} INTO candidates (id, iteration, idx, module, status, record, updated) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (cand.id, cand.iteration, cand.idx, cand.module, cand.status, record, time.time()),
        )

    def update(self, cand: Candidate) -> None:
        """Writes a candidate's new state (one transaction)."""
        with self._transaction() as db:
            self._put(db, cand)

    def candidates(self, iteration: int | None = None) -> list[Candidate]:
        """Candidates (of one iteration if given), by iteration and index."""
        query = "SELECT record FROM candidates"
        args: tuple = ()
        if iteration is not None:
            query += " WHERE iteration = ?"
            args = (iteration,)
        rows = self._db.execute(query + " ORDER BY iteration, idx", args).fetchall()
        return [Candidate.from_record(json.loads(r[0])) for r in rows]

    def candidate_dir(self, candidate_id: str) -> Path:
        """The artifact folder of a candidate (created on demand)."""
        path = self.root / "candidates" / candidate_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- iterations -----------------------------------------------------------------
    def finish_iteration(self, summary: IterationSummary) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO iterations VALUES (?, ?, ?, ?, ?, ?)",
                (summary.iteration, summary.score, summary.ema, summary.best_id,
                 int(summary.converged), time.time()),
            )  # fmt: skip

    def record_dek_update(self, iteration: int, stats: dict[str, Any], adapter: Path) -> None:
        """Records a low-level DEK update whose adapter was saved to ``adapter``."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO dek_updates VALUES (?, ?, ?, ?)",
                (iteration, json.dumps(stats, allow_nan=False),
                 str(adapter.relative_to(self.root)), time.time()),
            )  # fmt: skip

    def dek_updates(self) -> list[dict[str, Any]]:
        """Low-level DEK updates in iteration order: ``{iteration, stats, adapter}`` with
        ``adapter`` an absolute path."""
        rows = self._db.execute(
            "SELECT iteration, stats, adapter FROM dek_updates ORDER BY iteration"
        ).fetchall()
        return [
            {"iteration": r[0], "stats": json.loads(r[1]), "adapter": self.root / r[2]}
            for r in rows
        ]

    def iterations(self) -> list[IterationSummary]:
        rows = self._db.execute(
            "SELECT iteration, pa, ema, best_id, converged FROM iterations ORDER BY iteration"
        ).fetchall()
        return [IterationSummary(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows]
