"""The final report of an SE-RL run: top candidates and the test-day comparison.

The best candidate (highest validation score, ``loop.score``) and the reference
``j0-default`` (the default PPO, trained with the same budget) are reloaded from their
checkpoints, each with the action prior it trained with, and run on the test days next
to the baselines through the same rollout (once when the best is the reference); the
best is compared with the default PPO on the same orders (paired, on validation and test
days). With several agents (``marl.agents > 1``) the test days run in the dynamic market
with the run's evaluation profiles, each agent (and the team, ``team`` scenario) against
every agent running TWAP and TWAP-POV, and the paired comparison is over every agent's
order. Writes ``report.md`` (top candidates with code and metrics, the table),
``report.json`` and ``results.txt`` into the run folder, and marks the run finished.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from llm.validate import load_validated
from serl_jax.agents_experiment import evaluate_agents, make_agents_env
from serl_jax.config import LOOP_SCORES, Config, saved_network_config
from serl_jax.data import MarketSplits
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import (
    ORACLE,
    baseline_policies,
    calibrated_market,
    dynamic_env_params,
    evaluate_policies,
    make_env,
    mean_variance_per_order,
    score_reward,
)
from serl_jax.loop.agents_evaluation import agents_market, evaluation_profile
from serl_jax.loop.cascade import designer_cost, short_full_agreement, stage_counts
from serl_jax.loop.novelty import VALID, novelty
from serl_jax.loop.outer import REFERENCE_ID, SLOTS, LoopOutcome, paired_with_reference
from serl_jax.loop.store import Candidate, RunStore
from serl_jax.metrics import format_table, price_advantage, shortfall
from serl_jax.plots import plot_loop_progress
from serl_jax.rl.checkpoint import load_agents_policy, load_policy
from serl_jax.rl.marl import make_marl_policy
from serl_jax.rl.policy import make_ppo_policy

__all__ = ["self_debugging_counts", "write_report"]


def _meta(store: RunStore, key: str) -> Any:
    try:
        return store.meta(key)
    except KeyError:
        return None


def _designer_line(cost: dict[str, Any]) -> str:
    """report.md's line on the designer's cost (:func:`designer_cost`)."""
    if not cost["calls"]:
        return "Designer: no calls."
    line = f"Designer: {cost['calls']} call(s), {cost['completions']} completion(s) in "
    line += f"{cost['seconds']:.0f} s"
    if cost["tokens_per_s"] is not None:
        line += f", {cost['tokens']} tokens at {cost['tokens_per_s']:.1f} tokens/s"
    line += f"; {cost['valid']} valid program(s)"
    if cost["seconds_per_valid"] is not None:
        line += f", {cost['seconds_per_valid']:.1f} s of designer time per valid program"
    return line + "."


def _ppo_policy(cfg: Config, store: RunStore, cand: Candidate):
    """A candidate's policy, with the action prior it was trained with (a network program
    may declare its own anchor, saved in the checkpoint's config)."""
    network, params, meta = load_policy(
        store.candidate_dir(cand.id) / "checkpoint", define=load_validated
    )
    prior = saved_network_config(meta["config"]).prior()
    return make_ppo_policy(network, cfg.ppo.normalize_obs, action_prior=prior), params


def _candidate_md(cand: Candidate) -> str:
    m = cand.metrics or {}

    def fmt(key: str, spec: str) -> str:
        return "n/a" if m.get(key) is None else format(m[key], spec)

    head = (
        f"### {cand.id} ({cand.module}) — validation PA {fmt('pa', '.2f')} bps, "
        f"shortfall {fmt('shortfall', '.2f')} bps, WR {fmt('wr', '.3f')}, "
        f"GLR {fmt('glr', '.2f')}, AFI {fmt('afi', '.4f')}, "
        f"prior anchor {fmt('prior_anchor_steps', 'g')} steps"
    )
    code = []
    if cand.module in ("reward", "default"):
        code.append(f"Reward:\n```python\n{cand.reward_code.rstrip()}\n```")
    if cand.module in ("network", "default"):
        code.append(f"Network:\n```python\n{cand.network_code.rstrip()}\n```")
    for kind in ("imagination", "profiling", "communication"):
        if cand.slot_code(kind) and cand.module in (kind, "default"):
            code.append(f"{kind.title()}:\n```python\n{cand.slot_code(kind).rstrip()}\n```")
    return "\n\n".join([head, f"Instruction: {cand.instruction}", *code])


def self_debugging_counts(cands: list[Candidate]) -> dict[str, dict[str, int]]:
    """Per self-debugging round (``"1"``, ``"2"``, ...): ``sent``, the candidates sent
    back to the designer; ``repeats``, those of them that were valid and sent back for
    repeating a program (``search.retry_repeats``); and ``passed``, the retries that
    passed validation (evaluated, screened, crashed in training, or validated)."""
    valid = {c.id for c in cands if c.status in VALID}
    rounds: dict[str, dict[str, int]] = {}
    for c in cands:
        if c.attempt > 0:
            entry = rounds.setdefault(str(c.attempt), {"sent": 0, "repeats": 0, "passed": 0})
            entry["sent"] += 1
            entry["repeats"] += c.retry_of in valid
            entry["passed"] += c.status in VALID
    return dict(sorted(rounds.items(), key=lambda kv: int(kv[0])))


def _every_candidate_md(cands: list[Candidate]) -> list[str]:
    """The candidates table: what each is, what the repair pass fixed, and why it failed;
    then the code of each one rejected before training."""
    lines = [
        "## Every candidate",
        "",
        "| id | module | status | retry of | repaired | why it failed |",
        "|---|---|---|---|---|---|",
    ]
    for c in cands:
        why = " ".join(c.error.split())[:200].replace("|", "\\|")
        retry = f"{c.retry_of} (round {c.attempt})" if c.retry_of else ""
        repaired = "; ".join(c.repairs).replace("|", "\\|")
        lines.append(f"| {c.id} | {c.module} | {c.status} | {retry} | {repaired} | {why} |")
    for c in cands:
        if c.status == "rejected":
            shown = c.code or c.completion
            lines += [
                "",
                f"<details><summary>{c.id} ({c.module}): what the designer wrote</summary>",
                "",
                f"```{'python' if c.code else 'text'}\n{shown.rstrip()}\n```",
                "",
                "</details>",
            ]
    return lines


def _best_vs_default(
    cfg: Config, best: Candidate, best_rollout, default_rollout, params, days
) -> dict:
    """The best candidate minus the default PPO on the same orders (test ``days``, env
    parameters ``params``): ``{"validation", "test"}`` -> ``{"pa", "shortfall"}`` (and
    ``"mean_variance"`` with ``loop.score = mean_variance``: the rollouts carry its reward)
    -> ``{"value", "ci_low", "ci_high", "win_rate", "mde"}`` (bps, intervals clustered by
    day; validation None when the best is the default itself or lacks per-order values)."""

    def per_order(rollout) -> dict[str, list[float]]:
        outcomes = rollout.outcomes(float(params.side))
        out = {
            "pa_per_order": price_advantage(outcomes).tolist(),
            "shortfall_per_order": shortfall(outcomes).tolist(),
            "days_per_order": [str(d) for d in days],
        }
        if cfg.loop.score == "mean_variance":
            out["mean_variance_per_order"] = mean_variance_per_order(
                rollout, params.reward_scale
            ).tolist()
        return out

    return {
        "validation": None if best.id == REFERENCE_ID else (best.metrics or {}).get("vs_default"),
        "test": paired_with_reference(per_order(best_rollout), per_order(default_rollout)),
    }


def _best_vs_default_md(best_id: str, paired: dict) -> str:
    def line(days: str, entry: dict | None) -> str:
        if entry is None:
            return f"- {days} days: n/a"
        pa, cost = entry["pa"], entry["shortfall"]

        def f(x: float | None, sign: str = "+") -> str:
            return "n/a" if x is None else format(x, f"{sign}.2f")

        objective = entry.get("mean_variance")
        return (
            f"- {days} days: PA {f(pa['value'])} bps [{f(pa['ci_low'])}, {f(pa['ci_high'])}] "
            f"(MDE {f(pa.get('mde'), '')}), better on {pa['win_rate']:.0%} of orders; shortfall "
            f"{f(cost['value'])} bps [{f(cost['ci_low'])}, {f(cost['ci_high'])}] "
            f"(MDE {f(cost.get('mde'), '')})"
            + (
                ""
                if objective is None
                else f"; mean-variance {f(objective['value'])} bps [{f(objective['ci_low'])}, "
                f"{f(objective['ci_high'])}] (MDE {f(objective.get('mde'), '')})"
            )
        )

    return "\n".join(
        [
            f"## Best ({best_id}) minus the default PPO on the same orders (95% interval "
            "clustered by day, minimum detectable effect at 80% power)",
            "",
            line("validation", paired["validation"]),
            line("test", paired["test"]),
        ]
    )


def _once_per_candidate(
    names: dict[str, Candidate], evaluate: Callable[[dict[str, Candidate]], dict[str, Any]]
) -> dict[str, Any]:
    """``evaluate``'s results (by policy name) with each candidate of ``names`` evaluated
    once: when the best is the reference itself, its one rollout serves both names (the
    same policy on the same days and key gives the same results), the second name placed
    right after the first.

    Args:
        names: policy name -> candidate.
        evaluate: policy name -> candidate, for the names to roll out, to the results by
            name (those names and any others, e.g. baselines, in its own order).
    """
    first: dict[str, str] = {}
    same = {name: first.setdefault(cand.id, name) for name, cand in names.items()}
    computed = evaluate({name: cand for name, cand in names.items() if same[name] == name})
    results: dict[str, Any] = {}
    for name, value in computed.items():
        results[name] = value
        results.update({alias: value for alias, of in same.items() if of == name != alias})
    return results


def _single_agent_test(cfg: Config, store: RunStore, best: Candidate, reference: Candidate,
                       splits: MarketSplits) -> tuple[dict, dict, dict]:  # fmt: skip
    """The best candidate, the default PPO and the baselines on the test days, in the
    market candidates were scored in (static for ``loop.env=static``, else the dynamic
    market, without the hindsight oracle, whose bound holds in the static market only):
    the table's rows, ``report.json``'s ``test`` entry and the paired best vs default."""
    test_params = cfg.env_params(MarketData.from_episodes(splits.test))
    baselines = baseline_policies(cfg)
    if cfg.loop.env != "static":
        market = calibrated_market(cfg, cfg.loop.market)
        test_params = dynamic_env_params(cfg, market, test_params, splits.stats)
        baselines.pop(ORACLE)
    env = make_env(test_params, score_reward(cfg))  # rewards: the score's objective

    def evaluate(names: dict[str, Candidate]):
        policies = {name: _ppo_policy(cfg, store, cand) for name, cand in names.items()}
        policies.update(baselines)
        return evaluate_policies(cfg, env, test_params, policies, splits.test.dates)

    names = {f"SE-RL {best.id}": best, "PPO default": reference}
    results = _once_per_candidate(names, evaluate)
    rows = {(splits.name, name): m for name, (m, _) in results.items()}
    paired = _best_vs_default(
        cfg,
        best,
        results[f"SE-RL {best.id}"][1],
        results["PPO default"][1],
        test_params,
        splits.test.dates,
    )
    return rows, {name: m.to_dict() for name, (m, _) in results.items()}, paired


def _agents_policy(cfg: Config, store: RunStore, cand: Candidate):
    """A multi-agent candidate's policy (:func:`serl_jax.rl.marl.make_marl_policy`) and
    parameters, with the action prior it was trained with."""
    network, communication, params, meta = load_agents_policy(
        store.candidate_dir(cand.id) / "checkpoint", define=load_validated
    )
    prior = saved_network_config(meta["config"]).prior()
    return make_marl_policy(network, cfg.ppo.normalize_obs, prior, communication), params


def _agents_test(cfg: Config, store: RunStore, best: Candidate, reference: Candidate,
                 splits: MarketSplits) -> tuple[dict, dict, dict]:  # fmt: skip
    """The best multi-agent candidate, the default PPO agents and every agent running
    TWAP and TWAP-POV on the test days (dynamic market, evaluation profiles, one key):
    the table's rows (per agent, and the team's in the ``team`` scenario), ``report.json``'s
    ``test`` entry (per policy: ``agents``, a list of N metrics; ``team``; ``pa_spread``)
    and the paired best vs default over every agent's order."""
    _, params = agents_market(cfg, cfg.loop.market, ("test",))
    env = make_agents_env(cfg, evaluation_profile(cfg))

    def evaluate(names: dict[str, Candidate]):
        policies = {name: _agents_policy(cfg, store, cand) for name, cand in names.items()}
        return evaluate_agents(cfg, env, params["test"], policies, splits.test.dates)

    names = {f"SE-RL {best.id}": best, "PPO default": reference}
    results = _once_per_candidate(names, evaluate)
    rows = {}
    for name, result in results.items():
        for i, m in enumerate(result.agents):
            rows[(f"{splits.name} agent {i}", name)] = m
        if result.team is not None:
            rows[(f"{splits.name} team", name)] = result.team
    # pooled orders are day-major: day 0's agents first
    pooled_days = np.repeat(np.asarray(splits.test.dates, dtype=object), cfg.marl.agents)

    def per_order(name: str) -> dict[str, list[float]]:
        outcomes = results[name].rollout.pooled_outcomes()
        return {
            "pa_per_order": price_advantage(outcomes).tolist(),
            "shortfall_per_order": shortfall(outcomes).tolist(),
            "days_per_order": [str(d) for d in pooled_days],
        }

    paired = {
        "validation": None if best.id == REFERENCE_ID else (best.metrics or {}).get("vs_default"),
        "test": paired_with_reference(per_order(f"SE-RL {best.id}"), per_order("PPO default")),
    }
    entry = {
        name: {
            "agents": [m.to_dict() for m in result.agents],
            "team": None if result.team is None else result.team.to_dict(),
            "pa_spread": result.pa_spread,
        }
        for name, result in results.items()
    }
    return rows, entry, paired


def write_report(
    cfg: Config,
    store: RunStore,
    outcome: LoopOutcome,
    splits: MarketSplits,
    top: int = 5,
    wide: bool = False,
) -> str:
    """Evaluates the best candidate against the baselines on test days and writes the
    report files.

    Args:
        cfg: the run configuration.
        store: the run store (its candidates hold checkpoints).
        outcome: what :meth:`serl_jax.loop.SERLLoop.run` returned.
        splits: the market's splits (the test days are used).
        top: candidates listed with their code.
        wide: return the table with every column (default: the compact one,
            :func:`serl_jax.metrics.format_table`).

    Returns:
        The results table (text) to print; ``results.txt`` and ``report.md`` get it with
        every column.
    """
    evaluated = [c for c in store.candidates() if c.status == "evaluated" and not c.duplicate_of]
    ranked = sorted(evaluated, key=lambda c: -c.score)
    reference = next(c for c in evaluated if c.id == REFERENCE_ID)
    best = outcome.best
    test = _agents_test if cfg.marl.agents > 1 else _single_agent_test
    rows, test_entry, best_vs_default = test(cfg, store, best, reference, splits)
    table = format_table(rows, wide=True)

    cands = store.candidates()
    counts: dict[str, int] = {}
    for c in cands:
        counts[c.status] = counts.get(c.status, 0) + 1
    debugging = self_debugging_counts(cands)
    stages = cfg.search.stages if cfg.search.enabled else ("validation", "trial", "full")
    summary: dict[str, Any] = {
        "market": splits.name,
        "stopped": outcome.reason,
        "iterations": [vars(s) for s in outcome.iterations],
        "candidates": counts,
        "repaired": sum(bool(c.repairs) for c in cands),
        "self_debugging": debugging,
        "candidates_per_hour": outcome.candidates_per_hour,
        "compile_share": outcome.compile_share,
        "cache_hits": outcome.cache_hits,
        "best": best.to_record(),
        "top": [c.id for c in ranked[:top]],
        "test": test_entry,
        "best_vs_default": best_vs_default,
        **novelty(cands, {row["id"]: row["prompt"] for row in store.prompts()}, SLOTS),
        "stages": stage_counts(cands, outcome.elapsed_s, stages, _meta(store, "stage_seconds")),
        "short_vs_full": short_full_agreement(cands),
        "designer": designer_cost(cands, _meta(store, "designer_usage")),
    }
    (store.root / "report.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    (store.root / "results.txt").write_text(table + "\n")
    label = LOOP_SCORES[cfg.loop.score]
    plot_loop_progress(
        [s.iteration for s in outcome.iterations],
        [s.score for s in outcome.iterations],
        [s.ema for s in outcome.iterations],
        store.root / "loop_progress.png",
        label=label,
    )
    lines = [
        f"# SE-RL run on {splits.name}",
        "",
        f"Stopped: {outcome.reason} after {len(outcome.iterations) - 1} outer iterations; "
        f"candidates: {', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}; "
        f"{outcome.candidates_per_hour:.0f} candidates/hour, "
        f"{outcome.compile_share:.0%} of candidate time compiling, "
        f"{outcome.cache_hits:.0f} compiled programs from the persistent cache.",
        "",
        f"Repair pass: {summary['repaired']} candidate(s) repaired. Self-debugging "
        f"(`loop.repair_attempts` = {cfg.loop.repair_attempts}): "
        + (
            "; ".join(
                f"round {r}: {e['sent']} sent back"
                + (f" ({e['repeats']} repeating a program)" if e["repeats"] else "")
                + f", {e['passed']} passed validation"
                for r, e in debugging.items()
            )
            or "no candidate sent back"
        )
        + ".",
        "",
        "Cascade: "
        + "; ".join(
            f"{stage} {e['candidates']} entered, {e['passed']} passed"
            + ("" if e["trained"] is None else f", {e['trained']} trained")
            + ("" if e["candidates_per_hour"] is None else f" ({e['candidates_per_hour']:.0f}/h")
            + (
                ""
                if e["candidates_per_stage_hour"] is None
                else f", {e['candidates_per_stage_hour']:.0f} per hour of the stage"
            )
            + ("" if e["candidates_per_hour"] is None else ")")
            for stage, e in summary["stages"].items()
        )
        + "."
        + (
            ""
            if not summary["short_vs_full"] or summary["short_vs_full"]["spearman"] is None
            else f" Short against full stage: Spearman {summary['short_vs_full']['spearman']:.2f}"
            f" over {summary['short_vs_full']['n']} programs trained at both."
        ),
        "",
        f"Novelty: over the designer's {summary['designed_valid']} valid program(s), copy "
        f"rate {summary['copy_rate']:.0%} and functional duplicate rate "
        f"{summary['duplicate_rate']:.0%}; {summary['distinct_valid']} distinct valid "
        "program(s) in the run.",
        "",
        _designer_line(summary["designer"]),
        "",
        f"Candidates are ranked by their mean validation {label} (`loop.score`).",
        "",
        f"| j | {label}_j (bps) | {label}_ema (bps) | best |",
        "|---|---|---|---|",
        *(
            f"| {s.iteration} | {s.score:.2f} | {s.ema:.2f} | {s.best_id} |"
            for s in outcome.iterations
        ),  # fmt: skip
        "",
        _best_vs_default_md(best.id, best_vs_default),
        "",
        "## Test days",
        "```",
        table,
        "```",
        "",
        f"## Top {min(top, len(ranked))} candidates (validation {label})",
        "",
        *(_candidate_md(c) + "\n" for c in ranked[:top]),
        *_every_candidate_md(cands),
        "",
    ]
    (store.root / "report.md").write_text("\n".join(lines))
    store.set_meta("status", "finished")
    return format_table(rows, wide=wide)
