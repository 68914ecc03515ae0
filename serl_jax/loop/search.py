"""The SE-RL loop as a search: rounds of best-shot prompts over islands of scored
programs, evaluated through a cascade, until a budget of candidates or minutes is spent
(``search.enabled``; ``python -m serl_jax.train --budget-minutes M``).

Round 0 is the outer loop's: the reference ``j0-default`` (the default programs), trained
at every training stage of ``search.stages``; it seeds every island. Round 1 seeds the
islands from the design library (:mod:`llm.designs`): each library program of a designed
module is a candidate (``prompt_kind`` ``library``), dealt to the islands in turn, so
no island is shown the same fixed example. Each later round j:

1. **design** (``search.round_candidates`` candidates, fewer when the budget ends, all
   asked in one designer call): candidate i designs module ``loop.modules[i % M]`` on
   island ``(i // M) % search.islands`` (so every module visits every island) with a
   prompt kind drawn by ``search.prompt_mix`` (:func:`llm.prompts.search_prompt`):
   ``better`` shows up to ``search.shots`` of the island's programs in ascending score
   (FunSearch's best-shot prompt, Romera-Paredes et al. 2024); ``form`` shows the same
   and asks for another form; ``parameters`` shows the island's best and asks for other
   parameters; ``crossover`` shows one program of the island and one of another island
   that differs from it (Liu et al. 2024, "Evolution of Heuristics"). With
   ``search.hints`` (the default) a ``better``, ``form`` or ``parameters`` prompt ends by
   naming one change to the best program it shows, one the novelty probe can see
   (:func:`llm.prompts.hints.draw_hint`), and no dropped term that would return a reward
   program the run has; a ``parameters`` prompt whose program has no such constant, or a
   ``crossover`` whose first program has no part the best lacks, asks for a change of
   ``form`` instead. A change the run has named
   already to the same program (same canonical code, this round included) is not named
   again, and a constant's change names the values the run's programs have given it.
   A prompt whose text the run has asked already (this round included) is drawn again,
   up to :data:`REDRAWS` times (:func:`round_asks`). The other slots are the
   incumbent's (the best fully trained program), as in the outer loop.
2. **validation** and **trial**: the validator's static stage and its sandbox trial
   (:func:`llm.validate.validate`), with ``loop.repair_attempts`` self-debugging rounds;
   with ``search.retry_repeats`` a round also sends back the valid programs that repeat
   one (a copy of a shown program, or a functional duplicate as in step 3).
3. **short**: each candidate that passed is trained for ``search.short_fraction`` of the
   run's PPO steps and scored on validation days. A candidate whose program equals an
   earlier one's (after :func:`llm.parsing.program_text`), or that computes the same
   outputs on the novelty probe (:func:`serl_jax.loop.novelty.same_outputs`: a reward's
   terms, a network's outputs at initialization) with the same other slots, is not trained:
   it copies the earlier score (``duplicate_of``).
4. **full**: the best ``search.promote`` share of the round's short-stage programs
   (:func:`serl_jax.loop.cascade.promoted`) train with the run's whole PPO budget; their
   full scores rank the run (the best is the report's). The island database
   (:class:`serl_jax.loop.islands.ProgramDatabase`) holds short-stage scores, which all
   candidates have, so programs on it compare like with like.
5. every ``search.reset_every`` rounds the worse half of the islands is re-seeded from
   the better half's best programs (FunSearch).

The database is not stored: it is rebuilt from the candidates' records by replaying the
same adds and resets, so a killed run resumes (:meth:`SERLLoop.run`) with the same
islands and without training any finished stage again. Randomness (prompt kinds, shots,
resets; the hints from a second source, so that they leave the rest of a round's draws
as they were) comes from ``random.Random`` seeded by ``run.seed`` and the round.
"""

from __future__ import annotations

import contextlib
import copy
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from llm.designs import Design, library
from llm.parsing import program_text
from llm.prompts import repeat_prompt, search_prompt
from llm.prompts.hints import draw_hint, values_tried
from llm.prompts.search import in_prompt_order, named_change
from serl_jax.config import SEARCH_PROMPT_KINDS
from serl_jax.loop.cascade import budget_left, promoted
from serl_jax.loop.dispatch import ProgramEvaluator
from serl_jax.loop.islands import Program, ProgramDatabase
from serl_jax.loop.novelty import (
    PROBED,
    VALID,
    canonical_program,
    is_copy,
    probe_constant_fields,
    probe_outputs,
    same_outputs,
    without_term,
)
from serl_jax.loop.outer import REFERENCE_ID, SLOTS, SERLLoop, _designed_slots
from serl_jax.loop.store import Candidate, IterationSummary

__all__ = ["REDRAWS", "SEED_ROUND", "SERLSearch", "round_asks", "seed_designs"]

SEED_ROUND = 1
"""The round whose candidates are the design library's programs."""

REDRAWS = 8
"""Times a round draws a prompt's kind and programs again while the prompt's text is one
the run has asked already: the same prompt sampled again often gives the same program
(the 1.5B's Almgren-Chriss seed 0: one network prompt asked five times gave three
functional duplicates; 4 of the run's 8 answered a prompt asked before)."""


def seed_designs(modules: Sequence[str], names: Collection[str]) -> list[Design]:
    """The library programs that seed round 1: the designed modules' programs
    (:func:`llm.designs.library`), in library order, only those ``names`` lists when it
    is not empty (``search.library``).

    Args:
        modules: the designed modules (``loop.modules``).
        names: program names; empty: all of the modules' programs.

    Raises:
        ValueError: a name that no designed module's program has, as one line naming
            ``search.library``.
    """
    designs = [d for module in modules for d in library(module)]
    known = [d.name for d in designs]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"search.library: unknown program {unknown[0]!r} for modules {list(modules)}; "
            f"expected some of {known}"
        )
    return [d for d in designs if not names or d.name in names]


def round_asks(
    k: int,
    modules: Sequence[str],
    num_islands: int,
    draw: Callable[[int, str], tuple[str, list[Program], str]],
    asked: set[str],
    redraws: int = REDRAWS,
) -> list[tuple[str, int, str, list[Program], str]]:
    """A round's prompts: candidate i designs ``modules[i % M]`` on island
    ``(i // M) % num_islands``, so every module visits every island; a prompt whose text
    is in ``asked`` (the run's earlier prompts, then this round's) is drawn again, at most
    ``redraws`` times, and the last draw is kept.

    Args:
        k: the round's candidates (>= 0).
        modules: the designed modules, M >= 1 of them, in ``loop.modules`` order.
        num_islands: the program database's islands (>= 1).
        draw: ``(island, module) -> (kind, shots, text)``, one prompt drawn at random.
        asked: prompt texts asked already; this round's are added to it.
        redraws: draws again allowed per candidate (>= 0).

    Returns:
        ``(module, island, kind, shots, text)`` per candidate, in candidate order.
    """
    out = []
    for i in range(k):
        module = modules[i % len(modules)]
        island = (i // len(modules)) % num_islands
        for _ in range(redraws + 1):
            kind, shots, text = draw(island, module)
            if text not in asked:
                break
        asked.add(text)
        out.append((module, island, kind, shots, text))
    return out


def _island_score(cand: Candidate) -> float | None:
    """The score a program holds on its island: its short-stage score, else (a cascade
    without one) its full score; None when it has neither, or copied it."""
    for stage in ("short", "full"):
        entry = cand.stages.get(stage)
        if entry is not None:
            return None if entry.get("duplicate_of") else entry.get("score")
    return None


class SERLSearch(SERLLoop):
    """The outer loop run as a search (module docstring); same arguments as
    :class:`~serl_jax.loop.outer.SERLLoop`, which it drives through the same run store."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.search = self.cfg.search
        short = copy.deepcopy(self.config_dict)
        ppo = self.cfg.ppo
        rollout = ppo.num_envs * ppo.num_steps
        updates = max(1, round(ppo.num_updates * self.search.short_fraction))
        short["ppo"]["total_timesteps"] = updates * rollout
        self._short_config = short
        self._probes: dict[tuple[str, str], dict] = {}

    # -- stages ------------------------------------------------------------------------
    def _stage_run(self, stage: str):
        if stage == "short":
            if "full" not in self.search.stages:  # the final stage: the report's checkpoints
                return self._short_config, lambda c: str(self.store.candidate_dir(c.id))

            def folder(c: Candidate) -> str:
                path = self.store.candidate_dir(c.id) / "short"
                path.mkdir(exist_ok=True)
                return str(path)

            return self._short_config, folder
        return super()._stage_run(stage)

    def _stop_reason(self, j: int, elapsed_s: float) -> str | None:
        if j <= SEED_ROUND:
            return None
        return budget_left(self.search, self._designed(), elapsed_s)[1]

    def _designed(self) -> int:
        return sum(1 for c in self.store.candidates() if c.iteration > SEED_ROUND)

    # -- the program database ------------------------------------------------------------
    def database(self) -> ProgramDatabase:
        """The islands as of the finished rounds and the current one's scored programs,
        rebuilt by replaying the run's adds and resets."""
        db = ProgramDatabase(self.search.islands, self.search.island_capacity)
        finished = {s.iteration for s in self.store.iterations()}
        rounds = sorted({c.iteration for c in self.store.candidates()})
        for j in rounds:
            for cand in self.store.candidates(j):
                score = _island_score(cand)
                if score is None:
                    continue
                islands = range(self.search.islands) if cand.island is None else [cand.island]
                for module in _designed_slots(cand):
                    if module not in self.loop.modules:
                        continue
                    for island in islands:
                        db.add(island, Program(cand.id, module, cand.slot_code(module), score))
            every = self.search.reset_every
            if j in finished and j > SEED_ROUND and every and (j - SEED_ROUND) % every == 0:
                db.reset(random.Random(f"reset-{self.cfg.run.seed}-{j}"))
        return db

    # -- design ------------------------------------------------------------------------
    def _propose(self, j: int) -> None:
        if j == SEED_ROUND:
            self._propose_library()
            return
        with self._timed("design"):
            self._design(j)

    def _design(self, j: int) -> None:
        """Round j's prompts, all in one designer call, and their candidates."""
        k, _ = budget_left(self.search, self._designed(), float("-inf"))
        db = self.database()
        rng = random.Random(f"round-{self.cfg.run.seed}-{j}")
        # the hints' own draws, so that turning them on keeps the kinds and programs drawn
        hint_rng = random.Random(f"hints-{self.cfg.run.seed}-{j}")
        incumbent = self.best()
        reference = next(c for c in self.store.candidates(0) if c.id == REFERENCE_ID)

        cands = self.store.candidates()
        changes, tried = self._changes_asked(cands), self._values_tried(cands)
        hinted = self.search.hints and "reward" in self.loop.modules
        known = self._reward_outputs(cands) if hinted else []

        def draw(island: int, module: str) -> tuple[str, list[Program], str]:
            kind, shots = self._ask_kind(db, island, module, reference, rng)
            key = (module, canonical_program(in_prompt_order(shots)[-1].code))
            asked_of = changes.setdefault(key, set())
            kind, hint = self._kind_and_hint(
                kind, module, shots, hint_rng, asked=asked_of, tried=tried.get(module),
                known=known,
            )  # fmt: skip
            if hint is not None:
                asked_of.add(hint)
            text = search_prompt(
                kind,
                module,
                shots,
                score_label=self.score_label,
                macro=self.macro,
                style=self.loop.prompt_style,
                imagine=self.cfg.imagine,
                marl=self.cfg.marl,
                hint=hint,
            )  # fmt: skip
            return kind, shots, text

        asked = {row["prompt"] for row in self.store.prompts()}
        asks: dict[str, list[tuple[int, str, list[Program], str]]] = {}
        for module, island, kind, shots, text in round_asks(
            k, self.loop.modules, self.search.islands, draw, asked
        ):
            asks.setdefault(module, []).append((island, kind, shots, text))
        # one call for the round: 16 rows decoded 1.37x the tokens/s of 8 on a 2-core CPU
        counts = ", ".join(f"{len(group)} {module}" for module, group in asks.items())
        texts = [ask[3] for group in asks.values() for ask in group]
        answers = iter(self._ask(list(asks), texts, 1, f"[j={j}] {counts}: "))
        prompts: list[tuple[str, str, str, list[str], Any]] = []
        candidates: list[tuple[int, Candidate]] = []
        idx = 0
        for module, group in asks.items():
            for island, kind, shots, text in group:
                [completion] = next(answers)
                prompts.append((module, "design", text, [completion], None))
                parents = [s.candidate_id for s in shots] + [incumbent.id]
                cand = self._candidate(
                    j, idx, module, f"search prompt: {kind}", completion, incumbent, text,
                    parent_ids=list(dict.fromkeys(parents)), island=island, prompt_kind=kind,
                )  # fmt: skip
                candidates.append((len(prompts) - 1, cand))
                idx += 1
        self._record_proposals(j, prompts, candidates)

    def _changes_asked(self, cands: list[Candidate]) -> dict[tuple[str, str], set[str]]:
        """The changes the run's prompts have named, by the program they change (one of
        the run's ``cands``): ``{(module, canonical program): {hint, ...}}``
        (:func:`llm.prompts.search.named_change`)."""
        by_id = {c.id: c for c in cands}
        changes: dict[tuple[str, str], set[str]] = {}
        for row in self.store.prompts():
            named = named_change(row["prompt"])
            if named is None or named[0] not in by_id:
                continue
            code = by_id[named[0]].slot_code(row["module"])
            changes.setdefault((row["module"], canonical_program(code)), set()).add(named[1])
        return changes

    def _values_tried(self, cands: list[Candidate]) -> dict[str, dict[str, set[str]]]:
        """The values the valid programs among the run's ``cands`` give their named
        constants, by module (:func:`llm.prompts.hints.values_tried`)."""
        valid = [c for c in cands if c.status in VALID]
        return {m: values_tried(c.slot_code(m) for c in valid) for m in self.loop.modules}

    def _reward_outputs(self, cands: list[Candidate]) -> list[dict]:
        """The novelty probe's outputs of the reward programs of the run's valid
        ``cands`` (each code once)."""
        codes = dict.fromkeys(c.reward_code for c in cands if c.status in VALID)
        return [self._probe(code, "reward") for code in codes]

    def _kind_and_hint(
        self,
        kind: str,
        module: str,
        shots: list[Program],
        rng: random.Random,
        asked: Collection[str] = frozenset(),
        tried: Mapping[str, Collection[str]] | None = None,
        known: Sequence[Mapping[str, np.ndarray]] = (),
    ) -> tuple[str, str | None]:
        """The prompt's kind and the change it names (None: none, or ``search.hints`` off;
        ``asked``, ``tried``: as :func:`llm.prompts.hints.draw_hint`'s, for the best shown
        program; ``known``: the probe outputs of the run's reward programs, which no
        dropped term may return). With hints, a ``parameters`` prompt whose program has
        no constant the probe can see, or a ``crossover`` whose first program has no part
        the best lacks, asks for a change of ``form`` of the best instead: other
        parameters of it, or a combination of the two, could only return it (the 1.5B
        did, in index seed 1 of 2026-11-30 and the float32 seed 1 of 2026-12-01)."""
        if not self.search.hints:
            return kind, None
        hint = self._hint(kind, module, shots, rng, asked, tried, known)
        if hint is None and kind in ("parameters", "crossover"):
            kind = "form"
            hint = self._hint(kind, module, shots, rng, asked, tried, known)
        return kind, hint

    def _hint(
        self,
        kind: str,
        module: str,
        shots: list[Program],
        rng: random.Random,
        asked: Collection[str] = frozenset(),
        tried: Mapping[str, Collection[str]] | None = None,
        known: Sequence[Mapping[str, np.ndarray]] = (),
    ) -> str | None:
        """The change a prompt names (:func:`llm.prompts.hints.draw_hint`), leaving out
        what the novelty probe cannot see: a reward's terms that are zero on it (the best
        shown program's, and for a crossover the first one's) and the state fields with
        one value over it; the best reward's terms whose drop gives the outputs of a
        program in ``known`` (:func:`serl_jax.loop.novelty.without_term`); and the changes
        in ``asked``."""
        codes = [s.code for s in in_prompt_order(shots)]

        def inert(code: str) -> frozenset[str]:
            if module != "reward":
                return frozenset()
            return frozenset(n for n, v in self._probe(code, module).items() if not np.any(v))

        donor = inert(codes[0]) if kind == "crossover" and len(codes) > 1 else frozenset()
        drops = frozenset()
        if module == "reward" and known and kind in ("better", "form"):
            best = self._probe(codes[-1], module)
            drops = frozenset(
                term
                for term in best
                if term != "total"
                and any(same_outputs(without_term(best, term), other) for other in known)
            )
        return draw_hint(
            kind, module, codes, rng,
            inert_terms=inert(codes[-1]), inert_fields=probe_constant_fields(),
            donor_inert_terms=donor, known_drops=drops, asked=asked, tried=tried,
        )  # fmt: skip

    def _ask_kind(
        self,
        db: ProgramDatabase,
        island: int,
        module: str,
        reference: Candidate,
        rng: random.Random,
    ) -> tuple[str, list[Program]]:
        """A prompt kind drawn by ``search.prompt_mix`` and the programs it shows (an
        island with no program of the module shows the default, never as a crossover)."""
        kind = rng.choices(SEARCH_PROMPT_KINDS, weights=self.search.prompt_mix)[0]
        shots = self._shots(db, island, module, kind, rng)
        if not shots:
            code = reference.slot_code(module)
            shots = [Program(reference.id, module, code, float(reference.score))]
            kind = "better" if kind == "crossover" else kind
        return kind, shots

    def _shots(
        self, db: ProgramDatabase, island: int, module: str, kind: str, rng: random.Random
    ) -> list[Program]:
        """The programs a prompt of ``kind`` shows (ascending score; empty: none)."""
        if kind == "parameters":
            own = db.programs(island, module)
            return own[-1:]
        if kind == "crossover":
            own = db.shots(island, module, 1, rng)
            # another island's program unlike the island's: crossing a program with itself
            # (the default network under two rewards) can only return it
            twin = canonical_program(own[0].code) if own else None
            others = [
                i
                for i in range(db.num_islands)
                if i != island
                and any(canonical_program(p.code) != twin for p in db.programs(i, module))
            ]
            if not others or not own:
                return db.shots(island, module, self.search.shots, rng)
            theirs = db.shots(rng.choice(others), module, 1, rng, unlike=own[0].code)
            return sorted(own + theirs, key=lambda p: p.score)
        return db.shots(island, module, self.search.shots, rng)

    def _propose_library(self) -> None:
        """Round 1: every library program of each designed module (those
        ``search.library`` names, if any), dealt to the islands in turn (the framework's
        default, the reference's, left out)."""
        reference = next(c for c in self.store.candidates(0) if c.id == REFERENCE_ID)
        incumbent = self.best()
        candidates = []
        idx = 0
        defaults = {m: program_text(reference.slot_code(m)) for m in self.loop.modules}
        for design in seed_designs(self.loop.modules, self.search.library):
            module = design.kind
            if program_text(design.code) != defaults[module]:
                completion = f"Library program {design.name}.\n```python\n{design.code}```\n"
                cand = self._candidate(
                    SEED_ROUND, idx, module, f"library program {design.name}", completion,
                    incumbent, parent_ids=[incumbent.id], island=idx % self.search.islands,
                    prompt_kind="library",
                )  # fmt: skip
                candidates.append((None, cand))
                idx += 1
        self.store.add_proposals(SEED_ROUND, [], candidates)

    # -- evaluation --------------------------------------------------------------------
    def _probe(self, code: str, kind: str) -> dict:
        """A validated slot's outputs on the novelty probe, computed once per code."""
        if (kind, code) not in self._probes:
            self._probes[(kind, code)] = probe_outputs(code, kind)
        return self._probes[(kind, code)]

    def _functional_duplicates(self, pending: list[Candidate]) -> dict[str, Candidate]:
        """Candidate id -> the earlier candidate (trained at the short stage, or pending
        before it) that computes the same outputs in the candidate's designed slot on the
        novelty probe and has the same program text in every other slot."""
        texts: dict[tuple[str, str], str] = {}  # (candidate id, slot) -> program text

        def others(c: Candidate, module: str) -> tuple[str, ...]:
            for k in SLOTS:
                if (c.id, k) not in texts:
                    texts[(c.id, k)] = program_text(c.slot_code(k))
            return tuple(texts[(c.id, k)] for k in SLOTS if k != module)

        earlier = [
            c for c in self.store.candidates()
            if "short" in c.stages and _island_score(c) is not None
        ]  # fmt: skip
        out: dict[str, Candidate] = {}
        for cand in pending:
            module = cand.module
            if module in PROBED:
                mine, rest = self._probe(cand.slot_code(module), module), others(cand, module)
                for prior in earlier:
                    if others(prior, module) == rest and same_outputs(
                        mine, self._probe(prior.slot_code(module), module)
                    ):
                        out[cand.id] = prior
                        break
            if cand.id not in out:
                earlier.append(cand)
        return out

    def _sent_back(
        self, cands: list[Candidate], attempt: int, asked: dict[int, str]
    ) -> list[tuple[Candidate, str]]:
        """The outer loop's rejected candidates, then (``search.retry_repeats``) each
        validated designed candidate of :meth:`_unanswered` that repeats a program: a copy
        of a program its prompt showed, else the same outputs as an earlier candidate
        (:meth:`_functional_duplicates`), with :func:`llm.prompts.repeat_prompt`."""
        back = super()._sent_back(cands, attempt, asked)
        if not self.search.retry_repeats:
            return back
        originals = self._functional_duplicates([c for c in cands if c.status == "validated"])
        for cand in self._unanswered(cands, attempt):
            if cand.status != "validated" or cand.prompt_id is None:
                continue
            prompt = asked[cand.prompt_id]
            if is_copy(cand.code, prompt):
                back.append((cand, repeat_prompt(cand.module, prompt, cand.code, None)))
            elif cand.id in originals:
                original = originals[cand.id].id
                back.append((cand, repeat_prompt(cand.module, prompt, cand.code, original)))
        return back

    def _process(self, j: int, evaluator: ProgramEvaluator) -> None:
        """Round j through the cascade: validation and trial (with self-debugging),
        the short stage, then the full stage for the promoted; each stage records its
        results as they come, so a resumed round redoes only what is missing."""

        def proposed() -> list[Candidate]:
            return [c for c in self.store.candidates(j) if c.status == "proposed"]

        with self._timed("validation"):
            self._validate(proposed())
            for attempt in range(1, self.loop.repair_attempts + 1 if j > SEED_ROUND else 1):
                self._debug(j, attempt)
                self._validate(proposed())
        stages = self.search.stages
        if "short" in stages:
            with self._timed("short"):
                pending = [c for c in self.store.candidates(j) if c.status == "validated"]
                originals = self._functional_duplicates(pending)
                self._evaluate(pending, evaluator, "short", originals)
        if "full" not in stages:
            return
        if "short" in stages:
            cands = self.store.candidates(j)
            scores = {
                c.id: c.stages["short"]["score"]
                for c in cands
                if "short" in c.stages and _island_score(c) is not None
            }
            chosen = set(promoted(scores, self.search.promote)) if scores else set()
            if j == 0:
                chosen = {REFERENCE_ID}  # the reference is every run's full-stage pairing
            pending = [c for c in cands if c.id in chosen and "full" not in c.stages]
        else:
            pending = [c for c in self.store.candidates(j) if c.status == "validated"]
        with self._timed("full"):
            self._evaluate(pending, evaluator, "full")

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        """Adds the block's wall seconds to the run's ``stage_seconds[phase]`` (meta)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds = dict(self._meta("stage_seconds", {}))
            seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - t0
            self.store.set_meta("stage_seconds", seconds)

    def _finish(self, j: int) -> IterationSummary:
        """The round's summary: its best fully trained score (else its best short-stage
        score); the EMA is kept for the progress plot, and never stops the search."""
        cands = self.store.candidates(j)
        full = [c for c in cands if c.status == "evaluated"]
        pool = full or [c for c in cands if c.score is not None]
        best = max(pool, key=lambda c: c.score)
        ema, _ = self.convergence.update(j, float(best.score))
        summary = IterationSummary(
            j, float(best.score), ema, best.id if best.status == "evaluated" else None, False
        )
        self.store.finish_iteration(summary)
        self.log(
            f"[j={j}] {len(cands)} candidate(s); best {self.score_label} "
            f"{best.score:.2f} bps ({best.id}, {best.status})"
        )
        return summary
