"""The SE-RL outer loop (seeds' Algorithm 1): design, validate, train, score, reflect.

One outer iteration j:

1. (every ``loop.refine_every`` iterations) macro-micro refinement: the designer rewrites
   the design instruction from the instruction buffer's scored instructions;
2. for each module of ``loop.modules`` (``reward``, ``network``, ``imagination``; with
   several agents ``profiling`` and ``communication``,
   :mod:`serl_jax.loop.agents_evaluation`) one
   prompt (macro + micro + the best past candidates as in-context examples + feedback on
   the previous iteration; with ``loop.prompt_style = "compact"``, for small models, only
   the module's best past candidate or default and one edit instruction) asks for the
   module's share of the K candidates;
3. every completion is parsed and validated (both stages, in the sandbox);
4. each valid candidate is trained with the incumbent (best so far) of the other slots
   (an imagination candidate with the incumbent reward and network; it becomes part of
   the incumbent only if its program scores best) and scored on validation days
   (candidates that build the same network, e.g. reward candidates, train together in
   one compiled program, up to ``loop.candidate_batch``);
   a rejected or crashed candidate, or one still training at
   ``loop.train_budget_s``, scores ``loop.failure_score`` (less
   ``loop.failure_stage_step`` per stage it did not reach) and its error text goes into the
   next prompt;
5. the iteration's best score (``loop.score``: the validation orders' mean shortfall or
   PA, bps) updates the EMA convergence test;
6. with the low-level DEK on, the designer model's LoRA adapter takes a policy-gradient
   step on the iteration's (prompt, completion, score) samples
   (:mod:`llm.dek.low_level`), and the adapter is saved under ``adapters/j<j>/``.

``dek.level`` selects the DEK levels: ``high`` shows the instruction buffer's best past
candidates as in-context examples and refines the instruction; ``low`` fine-tunes the
model; ``both``; ``off`` (errors and reward reflection still go back at every level).

Iteration 0 evaluates the framework's defaults (``j0-default``: the default reward and
network, real training days only unless ``imagine.program`` names an imagination) as the
reference and the first in-context example. Every step is recorded in the run store as
it happens (:mod:`serl_jax.loop.store`); :meth:`SERLLoop.run` on a reopened store
continues where a killed run stopped, without generating or evaluating anything twice.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm.backends import Backend
from llm.dek import BufferEntry, InstructionBuffer
from llm.parsing import ParseError, extract_code, program_text
from llm.prompts import (
    COMPACT_INSTRUCTION,
    DEFAULT_INSTRUCTION,
    MICRO_PROMPTS,
    REFINEMENT_TOKENS,
    compact_prompt,
    debug_prompt,
    default_code,
    design_prompt,
    macro_prompt,
    parse_instruction,
    refinement_prompt,
)
from llm.repair import repair
from llm.validate import Limits, SandboxError, validate
from serl_jax.config import LOOP_SCORES, Config
from serl_jax.loop.cascade import DESIGNER_USAGE
from serl_jax.loop.convergence import EmaConvergence
from serl_jax.loop.dispatch import ProgramEvaluator
from serl_jax.loop.novelty import shown_programs
from serl_jax.loop.store import Candidate, IterationSummary, RunStore
from serl_jax.metrics import paired_difference
from serl_jax.rl.network_switch import switches_networks

__all__ = [
    "LoopOutcome",
    "SERLLoop",
    "candidate_feedback",
    "paired_with_reference",
    "run_macro_prompt",
]

REFERENCE_ID = "j0-default"


@dataclass(frozen=True)
class LoopOutcome:
    """The end state of a loop run.

    Attributes:
        iterations: summaries of the finished iterations (j = 0, 1, ...).
        best: the best evaluated candidate.
        reason: why the loop stopped (``converged``, ``max_iterations``; the search:
            ``budget_candidates`` or ``budget_minutes``).
        candidates_per_hour: evaluated (trained) candidates per hour of loop wall time.
        compile_share: share of candidate evaluation time spent compiling.
        cache_hits: compiled programs loaded from the persistent compilation cache
            (``loop.compilation_cache``) while training candidates.
        elapsed_s: the run's wall seconds (every session of a resumed run).
    """

    iterations: list[IterationSummary]
    best: Candidate
    reason: str
    candidates_per_hour: float
    compile_share: float
    cache_hits: float
    elapsed_s: float = 0.0


#: Where a candidate can fail, in order (validation stages, then training and scoring).
FAILURE_STAGES = ("parse", "static", "runtime", "training")


#: The slots of a program, in the order its key joins them (profiling and communication:
#: with several agents only).
SLOTS = ("reward", "network", "imagination", "profiling", "communication")


def _program_key(cand: Candidate) -> str:
    """One key per distinct program: the candidate's slots, each as
    :func:`llm.parsing.program_text`."""
    joined = "\0".join(program_text(cand.slot_code(kind)) for kind in SLOTS)
    return hashlib.sha256(joined.encode()).hexdigest()


def _trained_at(cand: Candidate, stage: str) -> bool:
    """Whether ``cand`` was itself trained and scored at ``stage`` (not a copy): its
    ``stages`` entry, or for a run recorded before stages were kept, an evaluated
    candidate at the full stage."""
    if stage in cand.stages:
        entry = cand.stages[stage]
        return entry.get("score") is not None and not entry.get("duplicate_of")
    return stage == "full" and cand.status == "evaluated" and not cand.duplicate_of


def _designed_slots(cand: Candidate) -> tuple[str, ...]:
    """The slots whose code is this candidate's own (validated with it, shown as its
    in-context example): the designed module, or every slot the reference fills."""
    if cand.module != "default":
        return (cand.module,)
    return tuple(kind for kind in SLOTS if cand.slot_code(kind))


def _throughput(seconds: float, completions: int, tokens: int | None) -> str:
    """The run log's line for one designer call: completions, seconds per candidate and,
    where the backend counts tokens, tokens and tokens/s."""
    line = (
        f"{completions} completion(s) in {seconds:.1f} s "
        f"({seconds / max(completions, 1):.1f} s per candidate"
    )
    if tokens is not None:
        line += f", {tokens} tokens, {tokens / max(seconds, 1e-9):.1f} tokens/s"
    return line + ")"


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def paired_with_reference(metrics: dict[str, Any], reference: dict[str, Any]) -> dict | None:
    """A candidate against the reference program on the same validation orders.

    Args:
        metrics, reference: the two programs' validation metrics
            (:class:`serl_jax.loop.evaluation.ProgramResult`), with ``pa_per_order`` and
            ``shortfall_per_order`` (and ``days_per_order``, the orders' days: the interval
            then clusters by day, :mod:`serl_jax.metrics.inference`; runs recorded before
            days were kept resample orders).

    Returns:
        ``{"pa": {...}, "shortfall": {...}}`` (and ``"mean_variance"`` when both have
        ``mean_variance_per_order``), each ``{"value", "ci_low", "ci_high",
        "win_rate", "mde"}`` (bps, 95% interval of the mean paired difference and its
        minimum detectable effect), or None when either lacks the per-order PA and
        shortfall (a run recorded before they were kept).
    """
    out = {}
    days = metrics.get("days_per_order")
    both = "mean_variance_per_order" in metrics and "mean_variance_per_order" in reference
    keys = [("pa_per_order", "pa"), ("shortfall_per_order", "shortfall")]
    keys += [("mean_variance_per_order", "mean_variance")] if both else []
    for key, name in keys:
        a, b = metrics.get(key), reference.get(key)
        if not a or not b or len(a) != len(b) or None in a or None in b:
            return None
        if days is not None and len(days) != len(a):
            days = None
        out[name] = paired_difference(np.asarray(a), np.asarray(b), days=days).to_dict()
    return out


#: The statistics of imagined vs real days shown to the designer: key, label, format.
_IMAGINED_STATISTICS = (
    ("volatility_bps", "1-minute volatility (bps)", ".2f"),
    ("abs_daily_return_bps", "|daily return| (bps)", ".1f"),
    ("day_volume", "day volume", ".4g"),
    ("return_autocorrelation", "lag-1 return autocorrelation", "+.3f"),
)


def _agents_feedback(m: dict[str, Any]) -> list[str]:
    """A multi-agent candidate's reflection lines: each agent's PA, the team's, the
    spread between agents and what their messages said (none for one agent)."""
    agents = m.get("agents")
    if not agents:
        return []
    side = {1.0: "sell", -1.0: "buy", None: "mixed"}

    def pa(entry: dict[str, Any]) -> str:
        lo, hi = entry.get("pa_ci") or (None, None)
        return (
            f"PA {_fmt(entry.get('pa'), '.2f')} bps [{_fmt(lo, '.2f')}, {_fmt(hi, '.2f')}], "
            f"shortfall {_fmt(entry.get('shortfall'), '.2f')} bps"
        )

    lines = [
        "  per agent on validation days (evaluation profiles): "
        + "; ".join(
            f"agent {a['agent']} ({side.get(a.get('side'), 'mixed')}) {pa(a)}" for a in agents
        )
        + f"; spread between agents {_fmt(m.get('pa_spread'), '.2f')} bps"
    ]
    if m.get("team"):
        lines.append(f"  team (the shared parent order): {pa(m['team'])}")
    said = m.get("messages")
    if said and said.get("mean") is not None:
        lines.append(
            f"  messages ({said['size']} numbers): mean "
            f"[{', '.join(format(v, '+.2f') for v in said['mean'])}], std "
            f"[{', '.join(format(v, '.2f') for v in said['std'])}]; std over an agent's own "
            f"minutes {_fmt(said.get('std_over_time'), '.3f')}, across agents in the same "
            f"minute {_fmt(said.get('std_across_agents'), '.3f')}"
        )
    return lines


def candidate_feedback(cand: Candidate, max_terms: int = 8) -> str:
    """One candidate's outcome as feedback text for the next prompt (reward reflection).

    Evaluated: metrics; with several agents, each agent's PA and shortfall, the team's
    (``team`` scenario), the spread between agents and statistics of their messages;
    with an imagination program, statistics of its imagined days against the real
    training days; per reward term, the mean episode sum at the first and last recorded
    update plus its share of all terms. Failed: the stage and error text.
    """
    head = f"- {cand.id} ({cand.module})"
    if cand.status == "rejected":
        v = cand.validation or {}
        return f"{head}: rejected at the {v.get('stage', '?')} stage: {v.get('reason', cand.error)}"
    if cand.status == "crashed":
        return f"{head}: {cand.error}"
    if cand.status != "evaluated" or not cand.metrics:
        return f"{head}: not evaluated"
    m = cand.metrics
    lo, hi = m.get("pa_ci") or (None, None)
    anchor = m.get("prior_anchor_steps")
    lines = [
        f"{head}: PA {_fmt(m.get('pa'), '.2f')} bps (95% CI {_fmt(lo, '.2f')} to "
        f"{_fmt(hi, '.2f')}), shortfall {_fmt(m.get('shortfall'), '.2f')} bps, "
        f"WR {_fmt(m.get('wr'), '.2f')}, GLR {_fmt(m.get('glr'), '.2f')}, "
        f"AFI {_fmt(m.get('afi'), '.3f')}"
        + ("" if anchor is None else f", prior anchor {anchor:g} steps")
        + (f" (same program as {cand.duplicate_of})" if cand.duplicate_of else "")
    ]
    paired = m.get("vs_default")
    if paired:
        pa, cost = paired["pa"], paired["shortfall"]
        lines.append(
            f"  vs {REFERENCE_ID} on the same validation orders: PA "
            f"{_fmt(pa['value'], '+.2f')} bps (95% CI {_fmt(pa['ci_low'], '+.2f')} to "
            f"{_fmt(pa['ci_high'], '+.2f')}, better on {_fmt(pa['win_rate'], '.0%')} of "
            f"orders); spread-and-impact shortfall {_fmt(cost['value'], '+.2f')} bps (95% CI "
            f"{_fmt(cost['ci_low'], '+.2f')} to {_fmt(cost['ci_high'], '+.2f')})"
        )
    lines.extend(_agents_feedback(m))
    imagined = m.get("imagination")
    if imagined:
        real, fake = imagined["real"], imagined["imagined"]
        lanes = imagined.get("lane_share")
        lines.append(
            f"  imagined vs real training days (mean per day; "
            f"{_fmt(imagined['out_of_bounds'], '.0%')} out of bounds, replayed real"
            + ("" if lanes is None else f"; {lanes:.0%} of training lanes on imagined days")
            + "): "
            + ", ".join(
                f"{label} {_fmt(fake[key], spec)} vs {_fmt(real[key], spec)}"
                for key, label, spec in _IMAGINED_STATISTICS
            )
        )
    stats = cand.reward_term_stats or {}
    history = stats.get("history") or []
    terms = [k for k in stats if k != "history"][:max_terms]
    if terms and history:
        first, last = history[0], history[-1]
        lines.append(
            f"  reward terms, mean per episode on validation days at update "
            f"{first['updates']} -> {last['updates']} (share of |terms|):"
        )
        for t in terms:
            a = first["episode_mean"].get(t)
            b = last["episode_mean"].get(t)
            share = stats[t].get("share")
            lines.append(
                f"    {t}: {_fmt(a, '.3f')} -> {_fmt(b, '.3f')}"
                + ("" if t == "total" else f" ({_fmt(share, '.0%')})")
            )
    return "\n".join(lines)


def run_macro_prompt(
    cfg: Config, obs_dim: int, num_features: int, communication: bool = False
) -> str:
    """The macro prompt of a run: :func:`llm.prompts.macro_prompt` with the run's
    lookback, score, child order type and agents.

    Args:
        cfg: the run configuration (``env``, ``loop``, ``marl``).
        obs_dim, num_features: observation size D and market features per slot F.
        communication: the agents exchange messages even if ``loop.modules`` does not
            design a communication module (a reference communication program is given).

    Returns:
        The prompt text.
    """
    one_agent_moves_prices = cfg.loop.env != "static" and cfg.marl.agents == 1
    market = cfg.market.simulator if one_agent_moves_prices else "static"
    return macro_prompt(
        obs_dim, num_features, int(cfg.env["lookback"]), score=cfg.loop.score,
        child_quantity=str(cfg.env["child_quantity"]), agents=cfg.marl.agents,
        scenario=cfg.marl.scenario, algorithm=cfg.marl.algorithm,
        communication=communication or "communication" in cfg.loop.modules,
        market=market,
    )  # fmt: skip


class SERLLoop:
    """Runs the outer loop on one market, recording everything in a :class:`RunStore`.

    Args:
        cfg: the run configuration (``loop``, ``ppo``, ``run``, ``env``, ``data``, ``eval``).
        backend: the designer (any :class:`llm.backends.Backend`).
        store: a new or reopened run store.
        obs_dim, num_features: observation size D and market features per slot F of the
            market (for the macro prompt).
        limits: validation limits (default :class:`llm.validate.Limits`).
        imagination_code: the reference candidate's imagination program (validated code;
            "": real training days only), e.g. ``imagine.program``'s.
        profiling_code, communication_code: with several agents (``marl.agents > 1``),
            the reference candidate's profile program (validated code, ``marl.profile``'s;
            "": the default profile) and communication module (``marl.communication``'s;
            "": no messages).
        low_level: the low-level DEK trainer wrapping the designer's model
            (:class:`llm.dek.low_level.LowLevelDEK`), or ``None``.
        log: where progress lines go (``None``: silent).
    """

    def __init__(
        self,
        cfg: Config,
        backend: Backend,
        store: RunStore,
        *,
        obs_dim: int,
        num_features: int,
        limits: Limits | None = None,
        imagination_code: str = "",
        profiling_code: str = "",
        communication_code: str = "",
        low_level: Any = None,
        log: Callable[[str], None] | None = lambda s: print(s, file=sys.stderr, flush=True),
    ):
        self.cfg = cfg
        self.loop = cfg.loop
        self.backend = backend
        self.store = store
        self.limits = limits or Limits()
        self.reference_codes = {
            "imagination": imagination_code,
            "profiling": profiling_code,
            "communication": communication_code,
        }
        self.bounds = cfg.imagine.bounds()
        self.low_level = low_level
        self.log = log or (lambda s: None)
        self.score_label = LOOP_SCORES[cfg.loop.score]
        self.macro = run_macro_prompt(
            cfg, obs_dim, num_features, communication=bool(communication_code)
        )
        self.config_dict = cfg.to_dict()
        #: In-context examples and instruction refinement (the high-level DEK).
        self.high_level = cfg.dek.level in ("high", "both")
        self.buffer = InstructionBuffer(self.loop.buffer_size)
        self.convergence = EmaConvergence(
            decay=self.loop.ema_decay,
            epsilon=self.loop.epsilon_bps,
            min_iterations=self.loop.min_iterations,
            max_iterations=self.loop.iterations,
        )

    # -- state -------------------------------------------------------------------------
    def _evaluated(self) -> list[Candidate]:
        return [c for c in self.store.candidates() if c.status == "evaluated"]

    def best(self) -> Candidate | None:
        """The best evaluated candidate so far (earliest among equal scores)."""
        best = None
        for c in self._evaluated():
            if best is None or c.score > best.score:
                best = c
        return best

    def _instruction(self) -> str:
        for row in reversed(self.store.prompts()):
            if row["purpose"] == "refinement" and row["result"]:
                return row["result"]
        return COMPACT_INSTRUCTION if self.loop.prompt_style == "compact" else DEFAULT_INSTRUCTION

    def _add_to_buffer(self, cand: Candidate) -> None:
        if cand.status != "evaluated" or cand.duplicate_of:
            return
        # The score is in the example's header; the other of PA and shortfall goes along.
        other = "pa" if self.loop.score == "shortfall" else "shortfall"
        metrics = {k: cand.metrics.get(k) for k in (other, "wr", "glr", "afi")}
        for module in _designed_slots(cand):
            self.buffer.add(
                BufferEntry(
                    cand.id, module, cand.instruction, cand.slot_code(module), cand.score, metrics
                )
            )

    def _failure_score(self, stage: str) -> float:
        """The score of a candidate that failed at ``stage`` (``parse``, ``static``,
        ``runtime`` or ``training``): ``loop.failure_score`` for a training failure and
        ``loop.failure_stage_step`` bps less for each stage earlier, so that selection and
        the low-level DEK's policy gradient prefer code that got further (with one score
        for every failure, a model writing only invalid code would get no gradient)."""
        earlier = len(FAILURE_STAGES) - 1 - FAILURE_STAGES.index(stage)
        return self.loop.failure_score - self.loop.failure_stage_step * earlier

    # -- steps -------------------------------------------------------------------------
    def _propose_reference(self) -> None:
        cand = Candidate(
            id=REFERENCE_ID,
            iteration=0,
            idx=0,
            module="default",
            instruction="the framework's default reward and network",
            code=default_code("reward", self.loop.score),
            reward_code=default_code("reward", self.loop.score),
            network_code=default_code("network"),
            **{f"{kind}_code": code for kind, code in self.reference_codes.items()},
        )
        self.store.add_proposals(0, [], [(None, cand)])

    def _split_candidates(self) -> dict[str, int]:
        shares = dict.fromkeys(self.loop.modules, 0)
        for i in range(self.loop.candidates):
            shares[self.loop.modules[i % len(self.loop.modules)]] += 1
        return {m: k for m, k in shares.items() if k > 0}

    def _propose(self, j: int) -> None:
        """Generates iteration j's candidates and records them (one transaction)."""
        previous = self.store.candidates(j - 1)
        feedback = "\n".join(candidate_feedback(c) for c in previous)
        instruction = self._instruction()
        prompts: list[tuple[str, str, str, list[str], Any]] = []
        refine = self.high_level and self.loop.refine_every > 0
        if refine and j > 1 and (j - 1) % self.loop.refine_every == 0:
            scored = list(reversed(self.buffer.instruction_scores()))
            prompt = refinement_prompt(
                self.macro, instruction, scored, feedback, score_label=self.score_label
            )
            [completions] = self.backend.generate(
                [prompt], n=1, temperature=self.loop.temperature,
                max_new_tokens=min(self.loop.max_new_tokens, REFINEMENT_TOKENS),
            )  # fmt: skip
            try:
                instruction = parse_instruction(completions[0])
                self.log(f"[j={j}] refined instruction: {instruction[:100]}")
            except ValueError as e:
                self.log(f"[j={j}] instruction refinement ignored: {e}")
                instruction = None
            prompts.append(("instruction", "refinement", prompt, completions, instruction))
            instruction = instruction or self._instruction()
        incumbent = self.best()
        # One prompt per sample (each showing its own example), or one prompt sampled k
        # times. Modules asking as many samples per prompt share one designer call: a local
        # model decodes 16 rows at 1.37x the tokens/s of 8 on a 2-core CPU.
        texts: dict[str, list[str]] = {}
        by_n: dict[int, list[str]] = {}
        for module, k in self._split_candidates().items():
            examples = (
                self.buffer.examples(self.loop.num_examples, module) if self.high_level else []
            )
            shown = MICRO_PROMPTS[module].examples if self.loop.vary_examples else ()
            texts[module] = [
                self._design_text(module, instruction, examples, feedback, example)
                for example in ([shown[i % len(shown)] for i in range(k)] if shown else [None])
            ]
            by_n.setdefault(1 if shown else k, []).append(module)
        answers: dict[str, list[list[str]]] = {}
        for n, modules in by_n.items():
            counts = ", ".join(f"{len(texts[m]) * n} {m}" for m in modules)
            asked = [t for m in modules for t in texts[m]]
            rows = iter(self._ask(modules, asked, n, f"[j={j}] {counts}: "))
            answers |= {m: [next(rows) for _ in texts[m]] for m in modules}
        candidates: list[tuple[int, Candidate]] = []
        idx = 0
        for module in texts:
            for prompt, completions in zip(texts[module], answers[module], strict=True):
                prompts.append((module, "design", prompt, completions, None))
                for completion in completions:
                    cand = self._candidate(
                        j, idx, module, instruction, completion, incumbent, prompt,
                        parent_ids=[incumbent.id],
                    )  # fmt: skip
                    candidates.append((len(prompts) - 1, cand))
                    idx += 1
        self._record_proposals(j, prompts, candidates)

    def _record_proposals(
        self,
        j: int,
        prompts: list[tuple[str, str, str, list[str], Any]],
        candidates: list[tuple[int | None, Candidate]],
    ) -> None:
        """Records round j's prompts and candidates (one transaction) and logs them."""
        self.store.add_proposals(j, prompts, candidates)
        for _, cand in candidates:
            self._report_candidate(cand)

    def _design_text(
        self,
        module: str,
        instruction: str,
        examples: list[BufferEntry],
        feedback: str,
        example: str | None,
    ) -> str:
        """One design prompt for ``module`` in the run's ``loop.prompt_style``, showing
        ``example`` (None: the module's default) where no past candidate is shown."""
        if self.loop.prompt_style == "compact":  # the best past candidate, or the example
            default = default_code(module, self.loop.score)
            base = examples[-1].code if examples else example or default
            return compact_prompt(module, base, instruction)
        return design_prompt(
            module, self.macro, instruction, examples, feedback, score_label=self.score_label,
            imagine=self.cfg.imagine, marl=self.cfg.marl, example=example,
        )  # fmt: skip

    def _ask(self, modules: list[str], prompts: list[str], n: int, label: str) -> list[list[str]]:
        """One designer call: ``n`` completions per prompt, for prompts of ``modules``,
        within the largest of their token budgets; logs ``label`` and the call's
        throughput."""
        budget = min(
            self.loop.max_new_tokens, max(MICRO_PROMPTS[m].max_new_tokens for m in modules)
        )
        t0 = time.perf_counter()
        answers = self.backend.generate(
            prompts, n=n, temperature=self.loop.temperature, max_new_tokens=budget
        )
        seconds = time.perf_counter() - t0
        done = [c for completions in answers for c in completions]
        counts = [self.backend.count_tokens(c) for c in done]
        tokens = sum(counts) if counts and None not in counts else None
        self.log(label + _throughput(seconds, len(done), tokens))
        usage = dict(self._meta("designer_usage", DESIGNER_USAGE))
        usage["calls"] += 1
        usage["completions"] += len(done)
        usage["seconds"] += seconds
        usage["tokens"] = (
            None if tokens is None or usage["tokens"] is None else (usage["tokens"] + tokens)
        )
        self.store.set_meta("designer_usage", usage)
        return answers

    def _candidate(
        self,
        j: int,
        idx: int,
        module: str,
        instruction: str,
        completion: str,
        base: Candidate,
        prompt: str = "",
        **fields: Any,
    ) -> Candidate:
        """A new candidate from a completion: its code extracted and repaired (rejected
        at the parse stage when there is none; the repair may borrow definitions from the
        programs ``prompt`` showed), the other slots' code from ``base`` (the incumbent,
        or the rejected candidate a retry answers for)."""
        cand = Candidate(
            id=f"j{j}-c{idx}", iteration=j, idx=idx, module=module, instruction=instruction,
            completion=completion, **fields,
        )  # fmt: skip
        try:
            cand.code, cand.repairs = repair(extract_code(completion), shown_programs(prompt))
        except ParseError as e:
            cand.status = "rejected"
            cand.validation = {"ok": False, "stage": "parse", "reason": str(e)}
            cand.error = f"no code: {e}"
            cand.score = self._failure_score("parse")
        for kind in SLOTS:
            setattr(cand, f"{kind}_code", cand.code if module == kind else base.slot_code(kind))
        return cand

    def _sent_back(
        self, cands: list[Candidate], attempt: int, asked: dict[int, str]
    ) -> list[tuple[Candidate, str]]:
        """The candidates of an iteration (``cands``) that self-debugging round
        ``attempt`` sends back, each with the prompt it goes back with: those of
        :meth:`_unanswered` rejected before training, with the validator's one-line error
        (:func:`llm.prompts.debug_prompt`; ``asked``: prompt text by prompt id)."""
        back = []
        for c in self._unanswered(cands, attempt):
            if c.status == "rejected":
                stage, reason = c.validation["stage"], c.validation["reason"]
                text = debug_prompt(c.module, asked[c.prompt_id], c.code, stage, reason)
                back.append((c, text))
        return back

    @staticmethod
    def _unanswered(cands: list[Candidate], attempt: int) -> list[Candidate]:
        """The candidates of round ``attempt - 1`` that no retry answers yet, of a module
        the designer writes."""
        answered = {c.retry_of for c in cands if c.retry_of}
        return [
            c
            for c in cands
            if c.attempt == attempt - 1 and c.id not in answered and c.module in MICRO_PROMPTS
        ]

    def _debug(self, j: int, attempt: int) -> list[Candidate]:
        """Self-debugging round ``attempt`` of iteration j (``loop.repair_attempts``):
        the candidates :meth:`_sent_back` selects go back to the designer, all of them in
        one generate call, every module's together: a local model decodes one answer at a
        third of its batched rate on a CPU (2026-11-28: 2.8-3.3 against 9.7-11.5
        tokens/s), and the round used to make one call per module. The answers are
        recorded as new candidates (``retry_of``, ``attempt``) and returned. A resumed run
        asks only for the retries it lacks."""
        cands = self.store.candidates(j)
        asked = {row["id"]: row["prompt"] for row in self.store.prompts(j)}
        back = self._sent_back(cands, attempt, asked)
        if not back:
            return []
        idx = max(c.idx for c in cands) + 1
        prompts: list[tuple[str, str, str, list[str], Any]] = []
        retries: list[tuple[int, Candidate]] = []
        texts = [text for _, text in back]
        modules = list(dict.fromkeys(c.module for c, _ in back))
        counts = ", ".join(f"{sum(c.module == m for c, _ in back)} {m}" for m in modules)
        repeats = sum(c.status != "rejected" for c, _ in back)
        counts += f" ({repeats} repeating a program)" if repeats else ""
        label = f"[j={j}] self-debugging round {attempt}: {counts} sent back: "
        completions = [a[0] for a in self._ask(modules, texts, 1, label)]
        for (sent, text), completion in zip(back, completions, strict=True):
            prompts.append((sent.module, "debug", text, [completion], None))
            cand = self._candidate(
                j, idx, sent.module, sent.instruction, completion, sent, text,
                parent_ids=list(sent.parent_ids), retry_of=sent.id, attempt=attempt,
                island=sent.island, prompt_kind=sent.prompt_kind,
            )  # fmt: skip
            retries.append((len(prompts) - 1, cand))
            idx += 1
        self._record_proposals(j, prompts, retries)
        return [cand for _, cand in retries]

    def _validate(self, pending: list[Candidate]) -> None:
        """Validates the designed slots of every pending candidate (both stages, in the
        sandbox), ``loop.validation_workers`` validations at once, the slots of one
        candidate among them (the reference has two or more). A candidate's verdict is its
        first slot to fail, in slot order, else its last slot's result; a slot that would
        start after another slot of its candidate failed is not validated (with one worker:
        exactly the slots up to the first failure). ``timing["validate"]`` sums its slots'
        seconds."""
        failed: set[str] = set()

        def check(cand: Candidate, kind: str):
            if cand.id in failed:
                return None
            t0 = time.perf_counter()
            bounds = self.bounds if kind == "imagination" else None
            try:
                result = validate(cand.slot_code(kind), kind, limits=self.limits, bounds=bounds)
            except SandboxError as e:
                raise SandboxError(f"validating {cand.id} ({kind}): {e}") from None
            if not result.ok:
                failed.add(cand.id)
            return result, time.perf_counter() - t0

        jobs = [(cand, kind) for cand in pending for kind in _designed_slots(cand)]
        workers = max(1, min(self.loop.validation_workers, len(jobs)))
        with ThreadPoolExecutor(workers) as pool:
            # submitted candidate by candidate, slot by slot: a slot starts after the ones
            # before it, so a skipped slot always follows the failed one
            futures = [(cand, pool.submit(check, cand, kind)) for cand, kind in jobs]
            try:
                for cand in pending:
                    result, seconds = None, 0.0
                    for future in (f for c, f in futures if c is cand):
                        checked = future.result()
                        if checked is None:  # after its candidate's failed slot
                            break
                        result, took = checked
                        seconds += took
                        if not result.ok:
                            break
                    cand.validation = result.to_dict()
                    cand.timing["validate"] = seconds
                    if result.ok:
                        cand.status = "validated"
                    else:
                        cand.status = "rejected"
                        cand.error = f"rejected at the {result.stage} stage: {result.reason}"
                        cand.score = self._failure_score(result.stage)
                    self.store.update(cand)
                    self._report_candidate(cand)
            except SandboxError as e:
                # Not the candidates' fault: stop instead of scoring them all as failed. The
                # unchecked candidates stay "proposed", so a resumed run validates them.
                pool.shutdown(cancel_futures=True)
                self.log(f"stopping: {e}")
                raise

    def _stage_run(self, stage: str) -> tuple[dict[str, Any], Callable[[Candidate], str]]:
        """The configuration a training stage runs with, and where a candidate's
        checkpoint and curves go: ``full``, the run's config in the candidate's folder."""
        if stage != "full":
            raise ValueError(f"stage: the outer loop trains only at the full stage, got {stage!r}")
        return self.config_dict, lambda c: str(self.store.candidate_dir(c.id))

    def _evaluate(
        self,
        pending: list[Candidate],
        evaluator: ProgramEvaluator,
        stage: str = "full",
        originals: dict[str, Candidate] | None = None,
    ) -> None:
        """Trains each distinct program once at ``stage`` and records its score
        (``cand.stages[stage]``); a candidate whose program was trained at that stage
        before (or earlier in this batch), or that ``originals`` maps to an earlier
        candidate (a functional duplicate), copies that result (``duplicate_of``).

        ``full`` candidates end ``evaluated`` (or ``crashed``); the search's ``short``
        stage (:mod:`serl_jax.loop.search`) ends ``screened``, or ``evaluated`` when the
        cascade has no full stage.
        """
        config, directory = self._stage_run(stage)
        final = stage == "full" or "full" not in self.cfg.search.stages
        done = {_program_key(c): c for c in self.store.candidates() if _trained_at(c, stage)}
        batch, repeats = [], []
        for cand in pending:
            key = _program_key(cand)
            original = (originals or {}).get(cand.id) or done.get(key)
            if original is not None:
                repeats.append((cand, original))
                continue
            batch.append(cand)
            done[key] = cand
        agents = self.cfg.marl.agents > 1
        tasks = [
            (config, self.loop.market, c.reward_code, c.network_code, directory(c),
             c.imagination_code)
            + ((c.profiling_code, c.communication_code) if agents else ())
            for c in batch
        ]  # fmt: skip
        for i, result in evaluator.evaluate(tasks):
            cand = batch[i]
            cand.timing.update(result.timing)
            score = result.metrics.get(self.loop.score) if result.ok else None
            cand.stages[stage] = {"score": score, "seconds": result.timing.get("total")}
            if score is not None:
                cand.status, cand.score = ("evaluated" if final else "screened"), score
                cand.metrics, cand.reward_term_stats = result.metrics, result.reward_term_stats
                reference = next(
                    (c for c in self.store.candidates(0) if c.id == REFERENCE_ID), None
                )
                if (
                    stage == "full"
                    and cand.id != REFERENCE_ID
                    and reference
                    and reference.status == "evaluated"
                ):
                    cand.metrics["vs_default"] = paired_with_reference(
                        cand.metrics, reference.metrics
                    )
                _write_curves(Path(directory(cand)), result.curves)
            else:
                cand.status = "crashed"
                cand.error = result.error or f"non-finite {self.score_label} on validation days"
                cand.score = self._failure_score("training")
            self.store.update(cand)
            self._add_to_buffer(cand)
            self._report_candidate(cand)
        for cand, original in repeats:
            cand.duplicate_of = original.id
            copied = original.stages.get(stage, {"score": original.score})
            cand.stages[stage] = {"score": copied.get("score"), "duplicate_of": original.id}
            if copied.get("score") is None:
                cand.status, cand.score, cand.error = "crashed", original.score, original.error
            else:
                cand.status = "evaluated" if final else "screened"
                cand.score, cand.error = copied["score"], ""
            cand.metrics, cand.reward_term_stats = original.metrics, original.reward_term_stats
            self.store.update(cand)
            self._report_candidate(cand)

    def _report_candidate(self, cand: Candidate) -> None:
        name = f"{cand.id} {cand.module}"
        if cand.retry_of:
            name += f" (round {cand.attempt}, retry of {cand.retry_of})"
        if cand.status in ("evaluated", "screened"):
            note = f" (= {cand.duplicate_of})" if cand.duplicate_of else ""
            note += " (short stage)" if cand.status == "screened" else ""
            paired = (cand.metrics or {}).get("vs_default")
            if paired and not cand.duplicate_of:
                diff = paired[self.loop.score]
                note += (
                    f", vs {REFERENCE_ID} {_fmt(diff['value'], '+.2f')} "
                    f"[{_fmt(diff['ci_low'], '+.2f')}, {_fmt(diff['ci_high'], '+.2f')}]"
                )
            t = cand.timing
            self.log(
                f"  {name}: {self.score_label} {cand.score:.2f} bps{note}"
                + (f" [{t['total']:.0f}s, compile {t['compile']:.0f}s" if "compile" in t else "")
                + (f", 1/{t['batch']:.0f} of a batch" if "batch" in t else "")
                + ("]" if "compile" in t else "")
            )
        elif cand.status in ("rejected", "crashed"):
            self.log(f"  {name}: {cand.status}: {cand.error[:160]}")
        elif cand.status == "proposed" and cand.repairs:
            self.log(f"  {name}: repaired: {'; '.join(cand.repairs)}")

    def _process(self, j: int, evaluator: ProgramEvaluator) -> None:
        """Validates iteration j's proposed candidates, sends the rejected ones back for
        up to ``loop.repair_attempts`` self-debugging rounds (validating each round's
        answers), then trains and scores every validated one."""

        def proposed() -> list[Candidate]:
            return [c for c in self.store.candidates(j) if c.status == "proposed"]

        self._validate(proposed())
        for attempt in range(1, self.loop.repair_attempts + 1 if j > 0 else 1):
            self._debug(j, attempt)
            self._validate(proposed())
        cands = self.store.candidates(j)
        self._evaluate([c for c in cands if c.status == "validated"], evaluator)

    def _finish(self, j: int) -> IterationSummary:
        cands = self.store.candidates(j)
        best = max(cands, key=lambda c: c.score if c.score is not None else -float("inf"))
        score = float(best.score)
        ema, stop = self.convergence.update(j, score)
        summary = IterationSummary(
            j, score, ema, best.id if best.status == "evaluated" else None, stop and j > 0
        )
        self.store.finish_iteration(summary)
        label = self.score_label
        self.log(
            f"[j={j}] {label}_j {score:.2f} bps ({summary.best_id}), {label}_ema {ema:.2f} bps"
        )
        return summary

    def _low_level_update(self, j: int) -> None:
        """One LoRA policy-gradient step on iteration j's samples; the adapter is saved
        (to a temporary folder renamed when complete) before the update is recorded."""
        prompts = {row["id"]: row["prompt"] for row in self.store.prompts(j)}
        samples = [
            (prompts[c.prompt_id], c.completion, float(c.score))
            for c in self.store.candidates(j)
            if c.prompt_id in prompts and c.score is not None
        ]
        update = self.low_level.update(samples)
        stats = update.to_dict()
        final = self.store.root / "adapters" / f"j{j}"
        staging = final.with_name(f".j{j}.incomplete")
        for path in (staging, final):
            if path.exists():
                shutil.rmtree(path)
        self.low_level.save(staging)
        staging.rename(final)
        self.store.record_dek_update(j, stats, final)
        if update.num_samples:
            moved = np.subtract(update.logprobs_after, update.logprobs_before)
            self.log(
                f"[j={j}] LoRA update on {update.num_samples} samples: loss {update.loss:.4g}, "
                f"scores {np.mean(update.scores):.2f} bps against baselines "
                f"{np.mean(update.baselines):.2f} bps on average, log p(completion) "
                f"{np.mean(moved):+.3f} nats on average"
            )
        else:
            self.log(f"[j={j}] LoRA update: no sample with a score and a completion")

    def _restore_low_level(self) -> set[int]:
        """Loads the latest saved adapter; returns the iterations already updated."""
        updates = self.store.dek_updates()
        if updates:
            self.low_level.load(updates[-1]["adapter"])
            self.log(f"restored the LoRA adapter of iteration {updates[-1]['iteration']}")
        return {u["iteration"] for u in updates}

    # -- main --------------------------------------------------------------------------
    def run(self) -> LoopOutcome:
        """Runs (or resumes) the loop until convergence or ``loop.iterations``.

        Raises:
            llm.backends.BackendError: the designer failed (the run stays resumable).
            llm.validate.SandboxError: the validation sandbox itself failed (the message
                names the candidate and the cause; the run stays resumable: candidates not
                yet validated stay ``proposed``).
            RuntimeError: the reference candidate failed (bad config or data).
        """
        finished = {s.iteration: s for s in self.store.iterations()}
        for s in finished.values():
            self.convergence.update(s.iteration, s.score)
        for c in self._evaluated():
            self._add_to_buffer(c)
        updated = self._restore_low_level() if self.low_level is not None else set()
        t_start = time.perf_counter()
        elapsed_before = float(self._meta("elapsed_seconds", 0.0))
        reason = "max_iterations"
        cache = self.store.root / "xla_cache" if self.loop.compilation_cache else None
        with ProgramEvaluator(
            self.loop.workers, cache, self.loop.train_budget_s, self.loop.candidate_batch,
            switch_networks=switches_networks(self.loop.switch_networks),
            executor=self.loop.executor, ray_address=self.loop.ray_address,
            ray_num_cpus=self.loop.ray_num_cpus, ray_num_gpus=self.loop.ray_num_gpus,
        ) as evaluator:  # fmt: skip
            for j in itertools.count():
                if j in finished:
                    if self.low_level is not None and j > 0 and j not in updated:
                        self._low_level_update(j)  # killed between scoring and update
                    if finished[j].converged:
                        reason = "converged"
                        break
                    continue
                if not self.store.candidates(j):
                    stop = self._stop_reason(j, elapsed_before + time.perf_counter() - t_start)
                    if stop is not None:
                        reason = stop
                        break
                    if j == 0:
                        self._propose_reference()
                    else:
                        self.log(f"[j={j}] asking the designer ({self.backend.name})")
                        self._propose(j)
                self._process(j, evaluator)
                if j == 0 and self.best() is None:
                    [ref] = self.store.candidates(0)
                    raise RuntimeError(f"the default program failed: {ref.error}")
                summary = self._finish(j)
                if self.low_level is not None and j > 0:
                    self._low_level_update(j)
                self.store.set_meta(
                    "elapsed_seconds", elapsed_before + time.perf_counter() - t_start
                )
                if summary.converged:
                    reason = "converged" if j < self.loop.iterations else "max_iterations"
                    break
        evaluated = [c for c in self._evaluated() if not c.duplicate_of]
        elapsed = float(self._meta("elapsed_seconds", 0.0))
        compile_s = sum(c.timing.get("compile", 0.0) for c in evaluated)
        total_s = sum(c.timing.get("total", 0.0) for c in evaluated)
        return LoopOutcome(
            iterations=self.store.iterations(),
            best=self.best(),
            reason=reason,
            candidates_per_hour=len(evaluated) / max(elapsed, 1e-9) * 3600.0,
            compile_share=compile_s / total_s if total_s > 0 else 0.0,
            cache_hits=sum(c.timing.get("cache_hits", 0.0) for c in evaluated),
            elapsed_s=elapsed,
        )

    def _stop_reason(self, j: int, elapsed_s: float) -> str | None:
        """Why no round ``j`` starts (None: it does): ``max_iterations`` past
        ``loop.iterations``. ``elapsed_s``: the run's wall seconds so far."""
        return "max_iterations" if j > self.loop.iterations else None

    def _meta(self, key: str, default: Any) -> Any:
        try:
            return self.store.meta(key)
        except KeyError:
            return default


def _write_curves(directory, curves: dict[str, list[float | None]]) -> None:
    np.savez_compressed(
        directory / "curves.npz",
        **{k: np.array([np.nan if v is None else v for v in vals]) for k, vals in curves.items()},
    )
