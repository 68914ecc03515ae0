"""The search's evaluation cascade: which candidates go on to the next stage, how many
reached each stage, and how much of the budget is left.

A candidate passes through the stages of :data:`serl_jax.config.SEARCH_STAGES`, each
dearer than the one before: ``validation`` (the static checks, milliseconds), ``trial``
(the sandbox's trial run, seconds), ``short`` (PPO for ``search.short_fraction`` of the
run's steps) and ``full`` (the whole PPO budget). After a round's short stage, the best
``search.promote`` share of its candidates go on to full training: synchronous
successive halving (Jamieson & Talwalkar 2016; Li et al. 2018, "Hyperband", one rung of
ASHA per round).

Stage counts (:func:`stage_counts`), from the candidates' records:

- ``validation``: candidates the validator saw (all designed ones); passed: no error at
  the parse or static stage.
- ``trial``: candidates that passed validation; passed: the sandbox's trial run too.
- ``short`` / ``full``: candidates that entered the stage (its score is then recorded,
  trained or, for a duplicate, copied); passed: scored with a finite value; trained: those
  that were not duplicates.

:func:`short_full_agreement` says whether the short stage is a fair screen: the rank
correlation of short and full scores over the promoted candidates. :func:`designer_cost`
prices the step before the cascade: the designer's seconds per valid program it wrote.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from scipy import stats

from serl_jax.config import SEARCH_STAGES, SearchConfig
from serl_jax.loop.novelty import VALID
from serl_jax.loop.store import Candidate

__all__ = [
    "DESIGNER_USAGE",
    "budget_left",
    "designer_cost",
    "promoted",
    "short_full_agreement",
    "stage_counts",
]

# A run's designer calls so far (run store meta ``designer_usage``): calls, completions,
# wall seconds in the calls, tokens generated (None where the backend counts none).
DESIGNER_USAGE = {"calls": 0, "completions": 0, "seconds": 0.0, "tokens": 0}


def promoted(scores: Mapping[str, float], fraction: float) -> list[str]:
    """The candidates promoted to the next stage: the best ``max(1, floor(fraction * n))``
    of the ``n`` scored ones.

    Args:
        scores: candidate id -> score at the stage (bps, higher is better), in run order;
            non-finite scores never go on.
        fraction: the promoted share, in (0, 1) (``search.promote``).

    Returns:
        The promoted ids, best first (ties: earlier in ``scores`` first); empty when no
        score is finite.

    Raises:
        ValueError: ``fraction`` outside (0, 1).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction: must be in (0, 1), got {fraction}")
    finite = [(i, cid, s) for i, (cid, s) in enumerate(scores.items()) if math.isfinite(s)]
    if not finite:
        return []
    keep = max(1, math.floor(fraction * len(finite)))
    ranked = sorted(finite, key=lambda t: (-t[2], t[0]))
    return [cid for _, cid, _ in ranked[:keep]]


def _passed_validation(cand: Candidate) -> bool:
    if cand.status != "rejected":
        return True
    return (cand.validation or {}).get("stage") == "runtime"


def _entered(cand: Candidate, stage: str) -> bool:
    if stage == "validation":
        return True
    if stage == "trial":
        return _passed_validation(cand)
    return stage in cand.stages


def _passed(cand: Candidate, stage: str) -> bool:
    if stage == "validation":
        return _passed_validation(cand)
    if stage == "trial":
        return cand.status != "rejected"
    score = cand.stages.get(stage, {}).get("score")
    return score is not None and math.isfinite(score)


def _per_hour(count: int, seconds: float | None) -> float | None:
    return count / seconds * 3600.0 if seconds is not None and seconds > 0 else None


def stage_counts(
    candidates: Iterable[Candidate],
    elapsed_s: float,
    stages: Iterable[str] = SEARCH_STAGES,
    stage_seconds: Mapping[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """How many candidates reached each stage of the cascade, and at what rate.

    Args:
        candidates: the run's candidates (the reference and library seeds included).
        elapsed_s: the run's wall seconds so far (``> 0`` for a rate).
        stages: the stages to count, in order.
        stage_seconds: wall seconds the run spent in each phase (``validation``, which
            runs the static checks and the trial together, ``short``, ``full``), or None.

    Returns:
        ``{stage: {"candidates", "passed", "trained", "candidates_per_hour", "seconds",
        "candidates_per_stage_hour"}}``: candidates that entered the stage, those that
        passed it, those trained in it (``short`` and ``full``; the others' ``trained`` is
        None), entered candidates per hour of the run's wall time, the wall seconds of
        the stage's phase and entered candidates per hour of it (rates None without a
        positive time).
    """
    cands = list(candidates)
    out = {}
    for stage in stages:
        entered = [c for c in cands if _entered(c, stage)]
        trained = None
        if stage in ("short", "full"):
            trained = sum(1 for c in entered if not c.stages[stage].get("duplicate_of"))
        phase = "validation" if stage == "trial" else stage
        seconds = None if stage_seconds is None else stage_seconds.get(phase)
        out[stage] = {
            "candidates": len(entered),
            "passed": sum(1 for c in entered if _passed(c, stage)),
            "trained": trained,
            "candidates_per_hour": _per_hour(len(entered), elapsed_s),
            "seconds": seconds,
            "candidates_per_stage_hour": _per_hour(len(entered), seconds),
        }
    return out


def short_full_agreement(candidates: Iterable[Candidate]) -> dict[str, Any] | None:
    """How well the short stage ranks programs as full training does: the Spearman rank
    correlation of the two scores over candidates trained at both (not copies).

    Promotion picks the best short-stage scores, so the pairs cover a narrowed range and
    the correlation understates the whole round's.

    Args:
        candidates: the run's candidates.

    Returns:
        ``{"n": pairs, "spearman": rho}``, or None with fewer than 3 pairs (rho is None
        when either score is constant).
    """
    pairs = [
        (c.stages["short"]["score"], c.stages["full"]["score"])
        for c in candidates
        if all(_passed(c, s) and not c.stages[s].get("duplicate_of") for s in ("short", "full"))
    ]
    if len(pairs) < 3:
        return None
    short, full = zip(*pairs, strict=True)
    if len(set(short)) < 2 or len(set(full)) < 2:
        return {"n": len(pairs), "spearman": None}
    return {"n": len(pairs), "spearman": float(stats.spearmanr(short, full).statistic)}


def budget_left(search: SearchConfig, designed: int, elapsed_s: float) -> tuple[int, str | None]:
    """The candidates the next round may design, and why the search stops when none.

    Args:
        search: the ``search`` section (``budget_candidates``, ``budget_minutes``,
            ``round_candidates``).
        designed: candidates designed so far (retries included; the reference and the
            library seeds not).
        elapsed_s: the run's wall seconds so far (a resumed run's earlier sessions too).

    Returns:
        ``(k, None)`` with ``1 <= k <= search.round_candidates`` to go on, or
        ``(0, reason)``: ``budget_minutes`` (the time is spent) or ``budget_candidates``.
    """
    if elapsed_s >= search.budget_minutes * 60.0:
        return 0, "budget_minutes"
    left = search.budget_candidates - designed
    if left <= 0:
        return 0, "budget_candidates"
    return min(left, search.round_candidates), None


def designer_cost(
    candidates: Iterable[Candidate], usage: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What the designer's programs cost: seconds of designer calls per valid program.

    A program counts as the designer's when it answers one of its prompts (a design or
    self-debugging prompt; ``prompt_id`` set): the reference and the search's library
    seeds do not. Valid: it passed validation and the sandbox trial (status
    ``validated``, ``screened``, ``evaluated`` or ``crashed``). Self-debugging calls count
    in the seconds, and their valid answers in the programs, as in the run log.

    Args:
        candidates: the run's candidates.
        usage: the run's designer calls (:data:`DESIGNER_USAGE`'s keys), or None (a run
            recorded before they were counted).

    Returns:
        ``{"calls", "completions", "seconds", "tokens", "tokens_per_s", "valid",
        "seconds_per_valid"}``: ``usage``'s counts (None without it), tokens per second
        (None without tokens or seconds), the designer's valid programs and seconds per
        valid program (None without both).
    """
    valid = sum(1 for c in candidates if c.prompt_id is not None and c.status in VALID)
    usage = dict(usage) if usage is not None else dict.fromkeys(DESIGNER_USAGE)
    seconds, tokens = usage["seconds"], usage["tokens"]
    timed = seconds is not None and seconds > 0
    return {
        **usage,
        "tokens_per_s": tokens / seconds if timed and tokens is not None else None,
        "valid": valid,
        "seconds_per_valid": seconds / valid if timed and valid else None,
    }
