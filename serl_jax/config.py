"""Run configuration: YAML presets plus dotted command-line overrides.

A config has twelve sections. ``env`` takes exactly the fields of
:class:`serl_jax.envs.execution.EnvParams` (but ``data``) and ``ppo`` those of
:class:`serl_jax.rl.ppo.PPOConfig`, so there is one place where each knob is defined and
documented. Unknown keys and values of the wrong type are rejected with a one-line
``ConfigError`` naming the key::

    cfg = load_config("configs/default.yaml", ["ppo.lr=1e-3", "env.side=-1"])
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from serl_jax.components.imagination import ImaginationBounds
from serl_jax.envs.execution import (
    CHILD_QUANTITIES,
    EnvParams,
    twap_action_prior,
    vwap_action_prior,
)
from serl_jax.envs.multi_agent import SCENARIOS
from serl_jax.lob.engine import LOB_ENGINES
from serl_jax.market.propagator import PropagatorConfig
from serl_jax.rl.hybrid import HybridConfig
from serl_jax.rl.marl import ALGORITHMS, MARLConfig
from serl_jax.rl.network_switch import SWITCH_NETWORKS
from serl_jax.rl.networks import check_action_multiples, declared_prior_anchor, make_network
from serl_jax.rl.ppo import ActionPrior, PPOConfig, no_action_prior

ACTION_PRIORS = ("twap", "vwap", "none")


class ConfigError(ValueError):
    """A bad configuration file, key or value (one-line message naming the key)."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Attributes:
    seed: master PRNG seed (training seeds are ``seed, seed+1, ...``).
    num_seeds: policies trained in parallel (vmapped); the best on validation days by
        ``loop.score`` (mean shortfall by default) is kept.
    out: parent folder of run folders.
    progress_chunk: PPO updates per jitted chunk between progress-bar refreshes.
    devices: devices to train on (:mod:`serl_jax.rl.sharding`): seeds are split over them
        when the count divides ``num_seeds``, else each seed's parallel episodes; 0 uses
        as many of the visible devices as divide one of them.
    distributed: train across processes and hosts (``python -m serl_jax.train --llm
        none`` runs): each process calls ``jax.distributed.initialize``
        (:func:`serl_jax.rl.sharding.start_processes`) and the seeds or episodes are
        split over every process's devices; every process then selects and evaluates
        on its own copy, and process 0 alone writes the run folder.
    coordinator_address: process 0's ``host:port``; "": ``JAX_COORDINATOR_ADDRESS`` or
        the cluster's variables (SLURM, Open MPI, Cloud TPU).
    num_processes: processes in the run; 0: from the cluster's variables.
    process_id: this process's index; -1: from the cluster's variables.
    """

    def __post_init__(self):
        if self.num_processes < 0:
            raise ValueError(f"run.num_processes: must be >= 0, got {self.num_processes}")
        if self.process_id < -1 or (self.num_processes and self.process_id >= self.num_processes):
            raise ValueError(
                f"run.process_id: expected -1 or 0 to {max(self.num_processes - 1, 0)} "
                f"(run.num_processes={self.num_processes}), got {self.process_id}"
            )

    seed: int = 0
    num_seeds: int = 2
    out: str = "runs"
    progress_chunk: int = 5
    devices: int = 0
    distributed: bool = False
    coordinator_address: str = ""
    num_processes: int = 0
    process_id: int = -1


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Attributes:
    markets: datasets to run on, each a folder/file path or ``sample:<name>`` for a
        shipped sample (``sample:cn_1min``, ``sample:us_1min``); one policy per market.
    train, val: fractions of each symbol's days (chronological); test gets the rest.
    min_bars_per_day: days with fewer bars are an error (or dropped, see short_days).
    short_days: ``"error"`` or ``"drop"`` (dropped days are reported, never silent).
    vol_window: rolling-volatility window of the features, minutes.
    heldout_symbols: symbols held out of training and selection; their test days are
        reported apart (:func:`serl_jax.data.hold_out_symbols`).
    heldout_fraction: instead, the share of symbols held out, in ``[0, 1)``, drawn with
        ``heldout_seed``.
    heldout_seed: seed of that draw.
    """

    markets: tuple[str, ...] = ("sample:cn_1min", "sample:us_1min")
    train: float = 0.6
    val: float = 0.2
    min_bars_per_day: int = 100
    short_days: str = "error"
    vol_window: int = 15
    heldout_symbols: tuple[str, ...] = ()
    heldout_fraction: float = 0.0
    heldout_seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(
                f"data.heldout_fraction: must be in [0, 1), got {self.heldout_fraction}"
            )
        if self.heldout_symbols and self.heldout_fraction:
            raise ValueError("data.heldout_symbols and data.heldout_fraction are both set; use one")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Attributes:
    hidden_sizes: widths of the actor and critic MLPs.
    activation: ``tanh``, ``relu`` or ``gelu``.
    action_prior: ``"twap"`` (the policy is a residual around the TWAP pace,
        :func:`serl_jax.envs.execution.twap_action_prior`), ``"vwap"`` (around the pace
        of the training volume profile, :func:`serl_jax.envs.execution.vwap_action_prior`)
        or ``"none"``.
    prior_anchor_steps: time constant, in steps, with which the prior pulls the
        inventory back to its schedule (0: catch up in one step, as the TWAP and VWAP
        baselines do); chosen on validation days (docs/results/learning.md, "Why PPO did
        not learn").
    action_multiples: a discrete action set (OPD-style): the policy picks one of these
        multiples of the prior's child order each minute
        (:class:`serl_jax.rl.distributions.PriorMultiples`); empty (default) for the
        logit-normal policy. Needs a prior (``twap`` or ``vwap``).
    """

    def __post_init__(self):
        if self.action_prior not in ACTION_PRIORS:
            raise ValueError(
                f"network.action_prior: expected one of {list(ACTION_PRIORS)}, "
                f"got {self.action_prior!r}"
            )
        if self.prior_anchor_steps < 0:
            raise ValueError(
                f"network.prior_anchor_steps: must be >= 0, got {self.prior_anchor_steps}"
            )
        check_action_multiples(self.action_multiples, "network.action_multiples")
        if self.action_multiples and self.action_prior == "none":
            raise ValueError(
                "network.action_multiples: a discrete action set multiplies the prior's "
                "child order; set network.action_prior to twap or vwap, not 'none'"
            )

    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    action_prior: str = "vwap"
    prior_anchor_steps: float = 20.0
    action_multiples: tuple[float, ...] = ()

    def build(self) -> Any:
        """The framework's network (:func:`serl_jax.rl.networks.make_network`) these
        settings describe."""
        return make_network(self.hidden_sizes, self.activation, self.action_multiples)

    def prior(self) -> ActionPrior:
        """The action prior these settings name: raw observation ``[..., D]`` -> logit."""
        if self.action_prior == "none":
            return no_action_prior
        prior = vwap_action_prior if self.action_prior == "vwap" else twap_action_prior
        return functools.partial(prior, anchor_steps=self.prior_anchor_steps)

    def for_network(self, network: Any) -> NetworkConfig:
        """These settings with the prior anchor a network program declares, if it declares
        one (:func:`serl_jax.rl.networks.declared_prior_anchor`).

        Raises:
            ValueError: the declared anchor is not a number of steps in the allowed range.
        """
        declared = declared_prior_anchor(network)
        if declared is None:
            return self
        return dataclasses.replace(self, prior_anchor_steps=declared)


def saved_run_config(saved: Mapping[str, Any]) -> Config:
    """The configuration an SE-RL run folder recorded (to resume it).

    Runs recorded before ``loop.score`` existed ranked candidates by PA and named the
    failure score ``loop.failure_pa``; they resume that way.

    Raises:
        ConfigError: unknown sections or keys, or bad values.
    """
    raw = {k: dict(v or {}) for k, v in saved.items()}
    loop = raw.setdefault("loop", {})
    loop.setdefault("score", "pa")
    if "failure_pa" in loop:
        loop["failure_score"] = loop.pop("failure_pa")
    return config_from_dict(raw)


def saved_network_config(saved: Mapping[str, Any]) -> NetworkConfig:
    """The network settings a checkpoint was trained with, from its saved config dict.

    Checkpoints written before the anchored prior used one-step tracking, so a saved
    ``network`` section without ``prior_anchor_steps`` means k = 0.

    Raises:
        ConfigError: the saved section has unknown keys or bad values.
    """
    network = {"prior_anchor_steps": 0.0, **saved.get("network", {})}
    return _section("network", NetworkConfig, network)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Attributes:
    ac_risk_aversion: Almgren–Chriss λ in units of 1/(Q·P) (0 = TWAP).
    confidence: confidence level of the bootstrap intervals.
    n_bootstrap: bootstrap resamples.
    plot_days: test days drawn in the inventory-trajectory plot.
    """

    ac_risk_aversion: float = 5.0
    confidence: float = 0.95
    n_bootstrap: int = 2000
    plot_days: int = 4


#: The slots the SE-RL designer can write (``loop.modules``); the default run designs the
#: first two.
LOOP_MODULES = ("reward", "network", "imagination", "profiling", "communication")
#: The loop modules of several agents only (``marl.agents > 1``).
MULTI_AGENT_MODULES = ("profiling", "communication")
#: What can rank SE-RL candidates (``loop.score``): the validation metric's key -> the
#: label prompts and reports give it.
LOOP_SCORES = {"shortfall": "shortfall", "pa": "PA", "mean_variance": "mean-variance"}
#: The designer's prompt layouts (``loop.prompt_style``).
PROMPT_STYLES = ("full", "compact")
#: Where SE-RL candidates train (``loop.executor``).
LOOP_EXECUTORS = ("local", "ray")
#: The ``hf:`` designer's weight types (``loop.hf_dtype``).
HF_DTYPES = ("bfloat16", "float32", "float16", "auto")
#: The ``hf:`` designer's weight quantizations (``loop.hf_quantize``).
HF_QUANTIZATIONS = ("none", "int8")


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The SE-RL outer loop (seeds' Algorithm 1; :mod:`serl_jax.loop`).

    Attributes:
        llm: the designer backend spec (``offline``, ``openai:<base_url>``,
            ``hf:<path>``, ``scripted:<file.json>``; see :func:`llm.backends.make_backend`),
            or ``none`` for plain PPO training without the loop.
        model: model name for the ``openai`` backend (empty: the server's default or
            ``$SERL_LLM_MODEL``).
        hf_device: where an ``hf:`` designer runs: ``auto`` (``cuda`` when PyTorch sees a
            GPU, else ``cpu``), ``cpu``, ``cuda`` or ``cuda:<i>``.
        hf_dtype: the ``hf:`` designer's weights: ``bfloat16`` (a 1.5B model in 5.4 GiB
            at 5.4 tokens/s on one thread of a 2-core AMD EPYC, against 8.7 GiB and 3.2
            tokens/s in float32; on a CPU without bfloat16 instructions float32 is the
            faster one, and the backend warns: :func:`llm.backends.hf.cpu_has_bfloat16`),
            ``float32``, ``float16`` or ``auto`` (the checkpoint's; a GGUF file
            dequantizes to float32).
        hf_quantize: ``none`` or ``int8``: the ``hf:`` designer's linear layers in int8
            with inputs quantized per token (torchao; a search round of the 1.5B 1.75x
            faster than float32 on a 2-core Xeon, :class:`llm.backends.hf.HFBackend`); not with
            the low-level DEK (``dek.level`` low or both), whose LoRA trains float weights.
        hf_threads: PyTorch CPU threads of the ``hf:`` designer (0: PyTorch's default).
        market: the dataset the loop designs for (``sample:<name>`` or a path).
        iterations: J_max, the most outer iterations (seeds: 50; the CPU default is 3 so
            that ``python -m serl_jax.train`` finishes in minutes; ``configs/gpu.yaml``
            uses 50).
        min_iterations: outer iterations before the convergence test may stop the loop.
        candidates: K, candidates proposed per iteration, split round-robin over ``modules``.
        modules: the slots the designer writes: ``reward``, ``network`` (the default;
            with ``marl.agents > 1`` and no ``modules`` given, ``profiling`` and
            ``communication`` too),
            ``imagination`` (LLM4Imagine: a program whose imagined days make up
            ``imagine.ratio`` of the training episodes; needs ``imagine.ratio > 0``; one
            agent only) and, with ``marl.agents > 1``, ``profiling`` (LLM4Profiling: the
            profiles the agents train on) and ``communication`` (LLM4Communication: the
            agents' messages).
        score: what ranks candidates, the mean over validation orders (bps, higher is
            better) of ``shortfall`` (the spread and impact paid against the replayed
            prices, negative; :func:`serl_jax.metrics.shortfall`) or ``pa`` (the price
            advantage against VWAP, as the seeds score). Every selection (of a
            candidate's seed too, and of plain PPO's with ``--llm none``), the in-context
            examples, the EMA stopping test and the low-level DEK's policy gradient use
            it. The default is shortfall: PA adds each order's timing against the day's
            price path (TWAP's PA has a standard deviation of about 20 bps per order on
            the cn sample), which no design controls and which swamps the 0.1-1.5 bps
            by which designs differ on a few dozen validation orders
            (docs/results/learning.md); the report gives both. ``mean_variance``:
            Almgren & Chriss's mean-variance objective, negated (impact cost plus
            ``env.urgency``'s risk term,
            :func:`~serl_jax.envs.execution.mean_variance_reward`), the task whose optimum
            is known in the propagator market's Almgren–Chriss configuration
            (:mod:`serl_jax.baselines.optimal`); plain PPO then trains on that reward, and
            so does the loop's reference candidate (one agent only).
        env: where one agent's candidates train and are scored: ``static`` (replayed
            bars, the default), ``dynamic`` (the dynamic market of ``market.simulator``,
            so a score pays for the candidate's own impact) or ``hybrid`` (trained in both
            at once, ``market.hybrid_config()``, scored in the dynamic market); the test
            days of the report run in the same market (:mod:`serl_jax.loop.evaluation`).
            Several agents train in ``market.mode``.
        ema_decay: decay of the score's moving average (seeds: 0.9).
        epsilon_bps: stop when the score's moving average moves less than this (seeds:
            0.1 bps).
        failure_score: score, bps, of a candidate that passed validation but failed in
            training or scoring (crashed, non-finite, over its budget).
        failure_stage_step: bps taken off ``failure_score`` for each stage a failed
            candidate did not reach (runtime validation: one step, static: two, parse:
            three), so that failures are ranked by how far the code got; 0: one score for
            every failure.
        prompt_style: ``full`` (the macro prompt with every state and parameter field, the
            module's contract and default code, in-context examples and feedback; about
            2,300 tokens) or ``compact`` (for small models: the module's signature in one
            line, one program to edit, the module's best past candidate or the default,
            and one edit instruction; :func:`llm.prompts.compact_prompt`).
        repair_attempts: self-debugging rounds (Eureka, Reflexion): a candidate rejected
            before training (no code, stage 1 or stage 2) goes back to the designer with
            its code and the validator's one-line error (:func:`llm.prompts.debug_prompt`),
            and the answer is a new candidate of the same iteration (``retry_of`` the
            rejected one, ``attempt`` 1, 2, ...), validated and trained like the others; a
            rejected retry goes back again, up to this many rounds (0: never).
        temperature: sampling temperature of the designer.
        max_new_tokens: the most tokens per completion, a cap over each module's own
            budget (:class:`llm.prompts.MicroPrompt`'s ``max_new_tokens``: 640 for a reward
            or network, 512 for an imagination, 320 for an instruction refinement).
        buffer_size: entries kept in the instruction buffer (best by score).
        num_examples: best past candidates shown in each prompt (in-context pairs).
        vary_examples: show each sample of an iteration a different example program, in
            turn, for the modules whose micro prompt has several
            (:class:`llm.prompts.MicroPrompt`'s ``examples``: LLM4Imagine shows the design
            library's five imaginations); off, every sample sees the one default example.
            Shown one example, Qwen2.5-Coder-1.5B returned it unchanged in 9 of its 12
            valid imaginations (2026-11-26).
        refine_every: macro-micro refinement of the instructions every this many
            iterations (0: never).
        workers: candidates trained at once in separate processes (1: in this process,
            unless ``train_budget_s`` is set); with ``executor: ray``, the Ray actors, one
            job each at a time. A round with fewer batches (``candidate_batch``) than
            workers has its batches split into near-equal parts, one a worker
            (:func:`serl_jax.loop.dispatch.plan_jobs`).
        executor: where candidates train: ``local`` (this machine's processes) or
            ``ray`` (actors on a Ray cluster, :mod:`serl_jax.loop.ray_pool`; needs
            ``pip install -e ".[distributed]"``). Validation stays in the driver's sandbox;
            the driver alone writes the run folder; a job that raises, passes its budget
            or loses its node fails alone, with the reason.
        ray_address: the Ray cluster: ``auto`` (``RAY_ADDRESS``, or the cluster ``ray
            start`` runs on this machine), ``local`` (start one in this process), or
            ``host:port``.
        ray_num_cpus, ray_num_gpus: the resources each actor declares (a fraction of a
            GPU shares it between actors).
        train_budget_s: wall-clock seconds one candidate may take to compile, train and
            score (0: no budget). A candidate still running at its budget has its
            worker process killed and scores ``failure_score`` with that reason; the loop goes
            on. With a budget every candidate trains in a worker process (a compiled chunk
            of updates cannot be interrupted in place). The default, 30 min, is about 50x
            a default-preset candidate on 2 CPU cores (36 s): a guard against hangs, not
            a tight budget; lower it to cut slow candidates short.
        validation_workers: stage-2 sandbox validations run at once.
        candidate_batch: the most candidates trained together in one compiled program,
            reward and prior chosen per lane by an index
            (:func:`serl_jax.loop.evaluation.evaluate_batch`): candidates whose network
            programs differ at most in the declared prior anchor (reward candidates with
            the incumbent network, anchor moves; any networks with ``switch_networks``);
            one compilation instead of K; 1: one
            candidate at a time. A batch holds ``candidate_batch * run.num_seeds *
            ppo.num_envs`` parallel episodes.
        switch_networks: whether candidates with different network programs (the same
            declared action set) train together too, behind an index
            (:class:`serl_jax.rl.network_switch.NetworkSwitch`) and taking turns
            (:func:`serl_jax.rl.network_switch.map_candidates`), one compilation for the
            batch: ``always``, ``never`` (each network compiles its own program), or
            ``auto`` (always when JAX's default device is a GPU or TPU, never on the CPU;
            :func:`serl_jax.rl.network_switch.switches_networks`). On 2 CPU cores
            (default preset, 6 library networks) compile seconds per candidate fall 2x and
            training seconds grow 1.3-1.4x: 1.15x the candidates per hour at the search's
            short stage, 0.98x at 40 updates (``benchmarks/bench_loop.py --slot
            network``), and a 12-minute search took the same wall time either way; on a
            GPU compiling was 89% of a short-stage candidate's time.
        compilation_cache: keep compiled XLA programs in ``<run>/xla_cache`` (JAX's
            persistent cache), reused by a resumed run.
    """

    def __post_init__(self):
        bad = [m for m in self.modules if m not in LOOP_MODULES]
        if bad or not self.modules:
            raise ValueError(f"loop.modules: expected some of {list(LOOP_MODULES)}, got {bad}")
        for key in ("iterations", "candidates", "workers", "validation_workers", "candidate_batch"):
            if getattr(self, key) < 1:
                raise ValueError(f"loop.{key}: must be >= 1, got {getattr(self, key)}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"loop.ema_decay: must be in [0, 1), got {self.ema_decay}")
        if self.train_budget_s < 0:
            raise ValueError(f"loop.train_budget_s: must be >= 0, got {self.train_budget_s}")
        if self.switch_networks not in SWITCH_NETWORKS:
            raise ValueError(
                f"loop.switch_networks: expected one of {list(SWITCH_NETWORKS)}, "
                f"got {self.switch_networks!r}"
            )
        if self.executor not in LOOP_EXECUTORS:
            raise ValueError(
                f"loop.executor: expected one of {list(LOOP_EXECUTORS)}, got {self.executor!r}"
            )
        for key in ("ray_num_cpus", "ray_num_gpus"):
            if getattr(self, key) < 0:
                raise ValueError(f"loop.{key}: must be >= 0, got {getattr(self, key)}")
        if self.repair_attempts < 0:
            raise ValueError(f"loop.repair_attempts: must be >= 0, got {self.repair_attempts}")
        if self.failure_stage_step < 0:
            raise ValueError(
                f"loop.failure_stage_step: must be >= 0, got {self.failure_stage_step}"
            )
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"loop.prompt_style: expected one of {list(PROMPT_STYLES)}, "
                f"got {self.prompt_style!r}"
            )
        if self.score not in LOOP_SCORES:
            raise ValueError(f"loop.score: expected one of {list(LOOP_SCORES)}, got {self.score!r}")
        if self.env not in MARKET_MODES:
            raise ValueError(f"loop.env: expected one of {list(MARKET_MODES)}, got {self.env!r}")
        if self.hf_dtype not in HF_DTYPES:
            raise ValueError(
                f"loop.hf_dtype: expected one of {list(HF_DTYPES)}, got {self.hf_dtype!r}"
            )
        if self.hf_quantize not in HF_QUANTIZATIONS:
            raise ValueError(
                f"loop.hf_quantize: expected one of {list(HF_QUANTIZATIONS)}, "
                f"got {self.hf_quantize!r}"
            )
        if self.hf_device not in ("auto", "cpu", "cuda") and not self.hf_device.startswith("cuda:"):
            raise ValueError(
                f"loop.hf_device: expected auto, cpu, cuda or cuda:<i>, got {self.hf_device!r}"
            )
        if self.hf_threads < 0:
            raise ValueError(f"loop.hf_threads: must be >= 0, got {self.hf_threads}")

    llm: str = "offline"
    model: str = ""
    hf_device: str = "auto"
    hf_dtype: str = "bfloat16"
    hf_quantize: str = "none"
    hf_threads: int = 0
    market: str = "sample:cn_1min"
    iterations: int = 3
    min_iterations: int = 2
    candidates: int = 4
    modules: tuple[str, ...] = ("reward", "network")
    ema_decay: float = 0.9
    epsilon_bps: float = 0.1
    score: str = "shortfall"
    env: str = "static"
    failure_score: float = -100.0
    failure_stage_step: float = 10.0
    prompt_style: str = "full"
    repair_attempts: int = 2
    temperature: float = 0.8
    max_new_tokens: int = 1024
    buffer_size: int = 32
    num_examples: int = 4
    vary_examples: bool = True
    refine_every: int = 2
    workers: int = 1
    executor: str = "local"
    ray_address: str = "auto"
    ray_num_cpus: float = 1.0
    ray_num_gpus: float = 0.0
    train_budget_s: float = 1800.0
    validation_workers: int = 2
    candidate_batch: int = 8
    switch_networks: str = "auto"
    compilation_cache: bool = True


#: The stages of the search's evaluation cascade (``search.stages``), in order.
SEARCH_STAGES = ("validation", "trial", "short", "full")
#: The designer's search prompts (``search.prompt_mix`` weighs them in this order).
SEARCH_PROMPT_KINDS = ("better", "form", "parameters", "crossover")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """The SE-RL loop as a search (:mod:`serl_jax.loop.search`): an evaluation cascade,
    islands of scored programs and best-shot prompts, run until a budget is spent.

    Attributes:
        enabled: run the search instead of the outer loop's iterations (``train
            --budget-minutes`` or ``--budget-candidates`` turn it on). The budget, not
            ``loop.iterations`` or the EMA test, ends the run.
        budget_candidates: the most designed candidates (retries included, the reference
            and library seeds not).
        budget_minutes: wall minutes after which no new round starts (a round under way
            finishes, so a run takes about this long; ``.inf``: no time budget).
        round_candidates: candidates designed per round (one designer call).
        stages: the cascade (successive halving, Li et al. 2018, "Hyperband"), a subset of
            ``validation`` (the static checks), ``trial`` (the sandbox's trial run),
            ``short`` (PPO for ``short_fraction`` of ``ppo.total_timesteps``) and ``full``
            (the run's whole PPO budget), in that order; validation and trial always run,
            and ``short`` or ``full`` (or both) scores.
        short_fraction: the short stage's share of ``ppo.total_timesteps``, in (0, 1).
        promote: the share of a round's short-stage candidates, best first, that go on to
            full training, in (0, 1): ``max(1, floor(promote * n))`` of n.
        library: the design library's programs (:func:`llm.designs.library`, by name)
            that seed the islands in round 1; empty: all of them. A short list makes a
            small budget's run start sooner (every seed is validated and trained first).
            Names are checked against the designed modules' programs before a run folder
            exists (:func:`serl_jax.loop.search.seed_designs`).
        islands: islands of the program database (FunSearch, Romera-Paredes et al. 2024).
        island_capacity: programs kept per module on each island (the best by score).
        shots: programs of its island a ``better`` prompt shows, in ascending score.
        reset_every: rounds between island resets (the worse half re-seeded from the
            better half's best programs); 0: never.
        prompt_mix: weights of the prompt kinds ``better`` (best-shot: beat these),
            ``form`` (a program of a different form), ``parameters`` (the best one's
            structure, other parameters) and ``crossover`` (combine programs of two
            islands), in that order (Liu et al. 2024, "Evolution of Heuristics").
        retry_repeats: in the self-debugging rounds (``loop.repair_attempts``), also send
            back each valid designed candidate that repeats a program (a copy of a program
            its prompt showed, or the same outputs on the novelty probe as an earlier
            candidate: :mod:`serl_jax.loop.novelty`) with :func:`llm.prompts.repeat_prompt`;
            the repeat keeps its place (scored with the first program's score) and the
            answer is a retry like a rejected candidate's.
        hints: each ``better``, ``form`` and ``parameters`` prompt names one concrete
            change drawn from the best program it shows (a constant and the value to
            set, a reward term, a network layer or activation:
            :func:`llm.prompts.hints.draw_hint`), as ELM's commit messages do, and a
            ``crossover`` one part of the other program to carry into it; on the
            1.5B's paired round 2 of three index runs, copies of a shown program went
            from 6 of 33 valid programs to 0 of 36 (2026-11-30).
    """

    def __post_init__(self):
        if self.budget_candidates <= 0:
            raise ValueError(f"search.budget_candidates: must be > 0, got {self.budget_candidates}")
        if not self.budget_minutes > 0:
            raise ValueError(f"search.budget_minutes: must be > 0, got {self.budget_minutes}")
        unknown = [s for s in self.stages if s not in SEARCH_STAGES]
        if unknown:
            raise ValueError(
                f"search.stages: unknown stage {unknown[0]!r}; expected some of "
                f"{list(SEARCH_STAGES)}"
            )
        if list(self.stages) != [s for s in SEARCH_STAGES if s in self.stages]:
            raise ValueError(
                f"search.stages: expected them in the order {list(SEARCH_STAGES)}, "
                f"got {list(self.stages)}"
            )
        if not {"validation", "trial"} <= set(self.stages) or not {"short", "full"} & set(
            self.stages
        ):
            raise ValueError(
                "search.stages: validation and trial always run, with short or full "
                f"(or both); got {list(self.stages)}"
            )
        for key in ("short_fraction", "promote"):
            if not 0.0 < getattr(self, key) < 1.0:
                raise ValueError(f"search.{key}: must be in (0, 1), got {getattr(self, key)}")
        for key in ("round_candidates", "islands", "island_capacity", "shots"):
            if getattr(self, key) < 1:
                raise ValueError(f"search.{key}: must be >= 1, got {getattr(self, key)}")
        if self.reset_every < 0:
            raise ValueError(f"search.reset_every: must be >= 0, got {self.reset_every}")
        mix = self.prompt_mix
        if len(mix) != len(SEARCH_PROMPT_KINDS) or min(mix) < 0 or sum(mix) <= 0:
            raise ValueError(
                f"search.prompt_mix: expected {len(SEARCH_PROMPT_KINDS)} weights >= 0 "
                f"({', '.join(SEARCH_PROMPT_KINDS)}) with a positive sum, got {list(mix)}"
            )

    enabled: bool = False
    budget_candidates: int = 1000
    budget_minutes: float = float("inf")
    round_candidates: int = 32
    stages: tuple[str, ...] = SEARCH_STAGES
    short_fraction: float = 0.25
    promote: float = 0.125
    library: tuple[str, ...] = ()
    islands: int = 4
    island_capacity: int = 8
    shots: int = 3
    reset_every: int = 4
    prompt_mix: tuple[float, ...] = (0.5, 0.2, 0.2, 0.1)
    retry_repeats: bool = False
    hints: bool = True


DEK_LEVELS = ("off", "high", "low", "both")


@dataclasses.dataclass(frozen=True)
class DekConfig:
    """The Dual-Level Enhancement Kit (:mod:`llm.dek`).

    Attributes:
        level: ``high`` (in-context examples from the instruction buffer and instruction
            refinement), ``low`` (LoRA policy-gradient fine-tuning of an ``hf:`` model
            after every outer iteration), ``both`` or ``off`` (for ablations; errors and
            reward reflection still go back to the designer at every level).
        lora_rank, lora_alpha, lora_dropout: LoRA adapter shape (rank r, scaling
            alpha / r, dropout on the adapter input).
        target_modules: module names to adapt; empty: chosen per architecture family
            (:func:`llm.dek.low_level.default_target_modules`).
        lr: learning rate of the adapter.
        optimizer: ``adamw`` or ``sgd``.
        weight_decay: decoupled weight decay (adamw).
        max_grad_norm: gradient clipping by global norm.
        baseline: ``leave_one_out``, ``mean`` or ``ema`` (b in -(PA - b) log p).
        baseline_decay: decay of the ``ema`` baseline across iterations.
        kl_coef: weight of the KL penalty to the frozen base model (0: none).
        normalize_advantages: divide the advantages by their root mean square.
        steps: gradient steps per outer iteration on that iteration's candidates.
        gradient_checkpointing: recompute each decoder layer in the backward pass instead
            of keeping its activations (less memory, one more forward pass per sample;
            :class:`llm.dek.low_level.LoRAConfig`).
    """

    def __post_init__(self):
        if self.level not in DEK_LEVELS:
            raise ValueError(f"dek.level: expected one of {list(DEK_LEVELS)}, got {self.level!r}")

    level: str = "high"
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = ()
    lr: float = 1e-5
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    baseline: str = "leave_one_out"
    baseline_decay: float = 0.9
    kl_coef: float = 0.0
    normalize_advantages: bool = True
    steps: int = 1
    gradient_checkpointing: bool = True


MARKET_MODES = ("static", "dynamic", "hybrid")
MARKET_SIMULATORS = ("lob", "propagator")


@dataclasses.dataclass(frozen=True)
class MarketConfig:
    """Which market PPO trains in (:mod:`serl_jax.market`, :mod:`serl_jax.rl.hybrid`).

    Attributes:
        mode: ``static`` (replayed minute bars), ``dynamic`` (the simulated market of
            ``simulator``) or ``hybrid`` (both at once, ``L = alpha L_static + beta
            L_dynamic``). With ``dynamic`` or ``hybrid``, a PPO policy trained in the
            static market is trained as well, and every policy is evaluated in both
            markets.
        simulator: the dynamic market: ``propagator`` (the replayed bars moved by the
            agents' own transient impact, section ``impact``,
            :mod:`serl_jax.market.propagator`; the default: it reproduces the square-root
            law, the relaxation after an order and time-consistent costs on the three
            large sets, where the order book does not, and runs at replay speed) or
            ``lob`` (background populations on a simulated order book,
            :mod:`serl_jax.market.simulator`).
        params: the ``lob`` market's calibrated background-population parameters (YAML
            from ``python -m serl_jax.calibrate``), or ``auto``: the shipped
            ``configs/market/<sample>.yaml`` of a ``sample:<name>`` market.
        child_order: ``market``, ``passive`` or ``sliced`` (market orders split evenly
            over the minute's trading rounds) child orders in the ``lob`` market.
        child_slices: a sliced child order's parts, sent at evenly spaced trading rounds
            (0: one per round; at most the book's ``rounds_per_minute``).
        dynamic_envs: parallel dynamic-market episodes per PPO rollout.
        alpha_init: initial weight of the static loss (beta = 1 - alpha).
        min_weight: alpha and beta are clipped to ``[min_weight, 1 - min_weight]``.
        adapt_weights: adapt alpha, beta by the relative losses (Eq. 5) or keep them.
    """

    def __post_init__(self):
        if self.mode not in MARKET_MODES:
            raise ValueError(
                f"market.mode: expected one of {list(MARKET_MODES)}, got {self.mode!r}"
            )
        if self.simulator not in MARKET_SIMULATORS:
            raise ValueError(
                f"market.simulator: expected one of {list(MARKET_SIMULATORS)}, "
                f"got {self.simulator!r}"
            )
        if self.child_order not in ("market", "passive", "sliced"):
            raise ValueError(
                f"market.child_order: expected market, passive or sliced, got {self.child_order!r}"
            )
        if not isinstance(self.child_slices, int) or self.child_slices < 0:
            raise ValueError(
                f"market.child_slices: expected an int >= 0, got {self.child_slices!r}"
            )

    mode: str = "hybrid"
    simulator: str = "propagator"
    params: str = "auto"
    child_order: str = "market"
    child_slices: int = 0
    dynamic_envs: int = 32
    alpha_init: float = 0.5
    min_weight: float = 0.1
    adapt_weights: bool = True

    def hybrid_config(self) -> HybridConfig:
        """The :class:`serl_jax.rl.hybrid.HybridConfig` of these settings."""
        return HybridConfig(
            dynamic_envs=self.dynamic_envs,
            alpha_init=self.alpha_init,
            min_weight=self.min_weight,
            adapt=self.adapt_weights,
        )


@dataclasses.dataclass(frozen=True)
class LobConfig:
    """The order book of the dynamic market (:mod:`serl_jax.lob`).

    Attributes:
        engine: ``auto`` (the engine measured fastest for the market on the default
            device's platform: ``vmap`` on CPU and GPU), ``vmap`` or ``batched``: which
            implementation applies the messages (same fills; :mod:`serl_jax.lob.engine`
            gives the speeds).
    """

    def __post_init__(self):
        if self.engine not in LOB_ENGINES:
            raise ValueError(
                f"lob.engine: expected one of {list(LOB_ENGINES)}, got {self.engine!r}"
            )

    engine: str = "auto"


@dataclasses.dataclass(frozen=True)
class ImagineConfig:
    """Imagined training days (LLM4Imagine, :mod:`serl_jax.components.imagination`).

    Attributes:
        program: the imagination program plain PPO trains with (``--llm none``), and in
            the SE-RL loop the reference candidate's (``j0-default``; the incumbent that
            reward and network candidates train with until an imagination candidate
            beats it): a name of the offline designer's library
            (``llm.designs.imaginations``) or a path to a ``.py`` file; validated like any
            candidate. Empty: no imagined days.
        ratio: the share of training episodes drawn from imagined days, in [0, 1] (the
            seeds' mixed sampling: 0.5). With ``ratio = r < 1`` the trainer keeps
            ``M = round(N r / (1 - r))`` imagined days beside the N real ones
            (:mod:`serl_jax.rl.mixed_sampling`). 0 trains exactly as without a program.
        tick_size: the instrument's tick handed to the program, currency per share
            (0: unknown).
        return_multiple, volatility_multiple, volume_multiple, profile_distance: the
            bounds of an imagined day against its source day
            (:class:`~serl_jax.components.imagination.ImaginationBounds`).
    """

    program: str = ""
    ratio: float = 0.5
    tick_size: float = 0.0
    return_multiple: float = 3.0
    volatility_multiple: float = 4.0
    volume_multiple: float = 4.0
    profile_distance: float = 0.5

    def __post_init__(self):
        if not 0.0 <= self.ratio <= 1.0:
            raise ValueError(f"imagine.ratio: must be in [0, 1], got {self.ratio}")
        if self.tick_size < 0:
            raise ValueError(f"imagine.tick_size: must be >= 0, got {self.tick_size}")
        self.bounds()  # range checks of the bounds

    def bounds(self) -> ImaginationBounds:
        """The :class:`~serl_jax.components.imagination.ImaginationBounds` of these keys."""
        return ImaginationBounds(
            return_multiple=self.return_multiple,
            volatility_multiple=self.volatility_multiple,
            volume_multiple=self.volume_multiple,
            profile_distance=self.profile_distance,
        )


@dataclasses.dataclass(frozen=True)
class MarlConfig:
    """Several execution agents in the dynamic market (:mod:`serl_jax.envs.multi_agent`,
    :mod:`serl_jax.rl.marl`).

    Attributes:
        agents: N, the execution agents (1: the single-agent paths). With N > 1,
            ``--llm none`` trains them in the dynamic market, or in the static and
            dynamic markets at once (``market.mode`` ``dynamic`` or ``hybrid``; not
            ``static``), and reports each agent's metrics and the team's in the dynamic
            market.
        algorithm: ``ippo`` (local critics) or ``mappo`` (a centralized critic).
        scenario: ``independent`` (each agent its own parent order) or ``team`` (one
            parent order shared, trained on the team reward and scored by team PA).
        critic_hidden_sizes: hidden widths of MAPPO's centralized critic.
        profile: the agents' profile program (LLM4Profiling,
            :mod:`serl_jax.components.profiling`): a name of the offline designer's
            library (``llm.designs.profiles``) or a path to a ``.py`` file, validated like
            any candidate before the run. Empty: every agent the single-agent draw.
        communication: the agents' communication module (LLM4Communication,
            :mod:`serl_jax.components.communication`): a library name
            (``llm.designs.communications``) or a ``.py`` file, validated before the run
            (``--comm`` without one: ``linear_message``). Empty: no messages.
    """

    agents: int = 1
    algorithm: str = "ippo"
    scenario: str = "independent"
    critic_hidden_sizes: tuple[int, ...] = (128, 128)
    profile: str = ""
    communication: str = ""

    def __post_init__(self):
        if self.agents < 1:
            raise ValueError(f"marl.agents: must be >= 1, got {self.agents}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"marl.algorithm: expected one of {list(ALGORITHMS)}, got {self.algorithm!r}"
            )
        if self.scenario not in SCENARIOS:
            raise ValueError(
                f"marl.scenario: expected one of {list(SCENARIOS)}, got {self.scenario!r}"
            )
        self.trainer_config()  # the critic's widths

    def trainer_config(self) -> MARLConfig:
        """The :class:`~serl_jax.rl.marl.MARLConfig` (team reward in the team scenario)."""
        return MARLConfig(
            algorithm=self.algorithm,
            team_reward=self.scenario == "team",
            critic_hidden_sizes=tuple(self.critic_hidden_sizes),
        )


# The env section's defaults are EnvParams' but one: a run's learned policies send
# participation child orders (docs/results/learning.md); EnvParams keeps the plain
# fixed-size child order, the one the baselines are defined with.
ENV_FIELDS = {
    **{f.name: f.default for f in dataclasses.fields(EnvParams) if f.name != "data"},
    "child_quantity": "participation",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole run configuration (see each section's class for its keys)."""

    run: RunConfig = RunConfig()
    data: DataConfig = DataConfig()
    env: Mapping[str, Any] = dataclasses.field(default_factory=lambda: dict(ENV_FIELDS))
    ppo: PPOConfig = PPOConfig()
    network: NetworkConfig = NetworkConfig()
    eval: EvalConfig = EvalConfig()
    loop: LoopConfig = LoopConfig()
    search: SearchConfig = SearchConfig()
    dek: DekConfig = DekConfig()
    market: MarketConfig = MarketConfig()
    lob: LobConfig = LobConfig()
    imagine: ImagineConfig = ImagineConfig()
    marl: MarlConfig = MarlConfig()
    impact: PropagatorConfig = PropagatorConfig()

    def env_params(self, data) -> EnvParams:
        """``EnvParams`` for the given ``MarketData`` with this config's env section."""
        return EnvParams(data=data, **self.env)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (lists for tuples), the format of the YAML presets."""

        def plain(x):
            if isinstance(x, tuple | list):
                return [plain(v) for v in x]
            if isinstance(x, Mapping):
                return {k: plain(v) for k, v in x.items()}
            return x

        return {
            "run": plain(dataclasses.asdict(self.run)),
            "data": plain(dataclasses.asdict(self.data)),
            "env": plain(dict(self.env)),
            "ppo": plain(dataclasses.asdict(self.ppo)),
            "network": plain(dataclasses.asdict(self.network)),
            "eval": plain(dataclasses.asdict(self.eval)),
            "loop": plain(dataclasses.asdict(self.loop)),
            "search": plain(dataclasses.asdict(self.search)),
            "dek": plain(dataclasses.asdict(self.dek)),
            "market": plain(dataclasses.asdict(self.market)),
            "lob": plain(dataclasses.asdict(self.lob)),
            "imagine": plain(dataclasses.asdict(self.imagine)),
            "marl": plain(dataclasses.asdict(self.marl)),
            "impact": plain(dataclasses.asdict(self.impact)),
        }


def _coerce(key: str, value: Any, default: Any, element: Any = "") -> Any:
    """Checks ``value`` against the type of ``default``; returns it in that type. A tuple's
    items are checked against its first item, or against ``element`` when it is empty."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if isinstance(default, tuple):
        items = value if isinstance(value, list | tuple) else [value]
        element = default[0] if default else element
        return tuple(_coerce(f"{key}[{i}]", v, element) for i, v in enumerate(items))
    raise ConfigError(f"{key}: unsupported value {value!r}")


def _section(name: str, cls, values: Mapping[str, Any]):
    """Builds one section from a mapping, rejecting unknown keys and bad types."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{name}: expected a mapping of keys, got {values!r}")
    if cls is None:  # the env section: EnvParams fields
        defaults = ENV_FIELDS
    else:
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ConfigError(f"{name}.{unknown[0]}: unknown key; valid keys: {', '.join(defaults)}")
    # an empty tuple default has no item to read the items' type from: the annotation has
    elements = {
        k: _empty_tuple_element(cls, k)
        for k in values
        if isinstance(defaults[k], tuple) and not defaults[k]
    }
    merged = {
        k: _coerce(f"{name}.{k}", values[k], defaults[k], elements.get(k, "")) for k in values
    }
    if cls is None:
        env = {**defaults, **merged}
        _check_env(env)
        return env
    try:
        return cls(**merged)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _empty_tuple_element(cls, key: str) -> Any:
    """A default item of the type the section's dataclass annotates for a tuple field
    (``tuple[float, ...]`` -> 0.0); "" when ``cls`` is None (the env section) or the field
    is no such tuple."""
    if cls is None:
        return ""
    args = typing.get_args(typing.get_type_hints(cls).get(key))
    return args[0]() if args and args[-1] is Ellipsis else ""


def _check_env(env: Mapping[str, Any]) -> None:
    """Range checks of the env section that types alone do not catch."""
    if env["side"] not in (1.0, -1.0):
        raise ConfigError(f"env.side: expected 1 (sell) or -1 (buy), got {env['side']}")
    if env["benchmark"] not in ("vwap", "twap"):
        raise ConfigError(f"env.benchmark: expected 'vwap' or 'twap', got {env['benchmark']!r}")
    for key in ("order_fraction", "participation_cap", "quantity_low", "lookback"):
        if env[key] <= 0:
            raise ConfigError(f"env.{key}: must be > 0, got {env[key]}")
    if env["quantity_high"] < env["quantity_low"]:
        raise ConfigError("env.quantity_high: must be >= env.quantity_low")
    if env["min_window_len"] < 1:
        raise ConfigError(f"env.min_window_len: must be >= 1, got {env['min_window_len']}")
    if env["step_minutes"] < 1:
        raise ConfigError(f"env.step_minutes: must be >= 1, got {env['step_minutes']}")
    if env["child_quantity"] not in CHILD_QUANTITIES:
        raise ConfigError(
            f"env.child_quantity: expected one of {CHILD_QUANTITIES}, got {env['child_quantity']!r}"
        )


_SECTIONS = {
    "run": RunConfig,
    "data": DataConfig,
    "env": None,
    "ppo": PPOConfig,
    "network": NetworkConfig,
    "eval": EvalConfig,
    "loop": LoopConfig,
    "search": SearchConfig,
    "dek": DekConfig,
    "market": MarketConfig,
    "lob": LobConfig,
    "imagine": ImagineConfig,
    "marl": MarlConfig,
    "impact": PropagatorConfig,
}


def _multi_agent_modules(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """With several agents (``marl.agents > 1``) and no ``loop.modules`` given, the loop
    designs the multi-agent modules too: ``reward, network, profiling, communication``."""
    loop, marl = raw.get("loop") or {}, raw.get("marl") or {}
    if not isinstance(loop, Mapping) or not isinstance(marl, Mapping) or "modules" in loop:
        return raw
    agents = marl.get("agents", 1)
    if not isinstance(agents, int) or agents <= 1:
        return raw
    modules = (*LoopConfig.modules, *MULTI_AGENT_MODULES)
    return {**raw, "loop": {**loop, "modules": list(modules)}}


def config_from_dict(raw: Mapping[str, Any]) -> Config:
    """Builds a :class:`Config` from a nested mapping (missing keys take defaults).

    Raises:
        ConfigError: unknown section or key, or a value of the wrong type.
    """
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section; valid: {', '.join(_SECTIONS)}")
    raw = _multi_agent_modules(raw)
    cfg = Config(
        **{name: _section(name, cls, raw.get(name) or {}) for name, cls in _SECTIONS.items()}
    )
    dynamic = cfg.market.mode != "static" or cfg.loop.env != "static"  # a market to check
    if dynamic and cfg.market.dynamic_envs % cfg.ppo.group_size:
        raise ConfigError(
            f"ppo.group_size={cfg.ppo.group_size} must divide "
            f"market.dynamic_envs={cfg.market.dynamic_envs} (sibling lanes in both markets)"
        )
    if dynamic and cfg.market.simulator == "propagator":
        try:
            cfg.impact.check_round_trips()
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if cfg.loop.hf_quantize != "none" and cfg.dek.level in ("low", "both"):
        raise ConfigError(
            f"loop.hf_quantize={cfg.loop.hf_quantize}: the low-level DEK (dek.level="
            f"{cfg.dek.level}) trains LoRA on float weights; set loop.hf_quantize=none"
        )
    if cfg.search.enabled and cfg.loop.llm.strip().lower() == "none":
        raise ConfigError("search.enabled: the search needs a designer; set --llm (loop.llm)")
    if cfg.search.enabled and cfg.marl.agents > 1:
        raise ConfigError(
            f"search.enabled: the search designs for one agent; got marl.agents={cfg.marl.agents}"
        )
    if cfg.loop.score == "mean_variance" and cfg.marl.agents > 1:
        raise ConfigError(
            "loop.score=mean_variance: the mean-variance objective scores one agent (marl.agents=1)"
        )
    if cfg.marl.agents > 1 and cfg.market.mode == "static":
        raise ConfigError(
            f"marl.agents={cfg.marl.agents}: several agents train in the dynamic or hybrid "
            "market, not static; set market.mode=dynamic or hybrid"
        )
    if cfg.marl.agents == 1 and set(cfg.loop.modules) & set(MULTI_AGENT_MODULES):
        raise ConfigError(
            f"loop.modules: {', '.join(MULTI_AGENT_MODULES)} design several agents; set "
            "marl.agents > 1 (--agents N) or leave them out"
        )
    if cfg.marl.agents > 1 and ("imagination" in cfg.loop.modules or cfg.imagine.program):
        raise ConfigError(
            f"marl.agents={cfg.marl.agents}: imagined days (loop.modules 'imagination', "
            "imagine.program) are single-agent only; leave them out"
        )
    if cfg.env["step_minutes"] > 1 and (cfg.market.mode != "static" or cfg.marl.agents > 1):
        raise ConfigError(
            f"env.step_minutes={cfg.env['step_minutes']}: decision intervals run in the static "
            "market with one agent (market.mode=static, --env static)"
        )
    if cfg.network.action_multiples and cfg.loop.llm.strip().lower() != "none":
        raise ConfigError(
            "network.action_multiples: sets the action set of the framework's network "
            "(--llm none); in the SE-RL loop a network program declares its own "
            "(field action_multiples)"
        )
    if cfg.ppo.distill_coef > 0.0 and (
        cfg.loop.llm.strip().lower() != "none"
        or cfg.market.mode != "static"
        or cfg.marl.agents > 1
        or cfg.imagine.program
    ):
        raise ConfigError(
            f"ppo.distill_coef={cfg.ppo.distill_coef}: policy distillation trains one "
            "agent with --llm none in the static market on real days (market.mode=static, "
            "no imagine.program)"
        )
    if "imagination" in cfg.loop.modules and cfg.imagine.ratio == 0.0:
        raise ConfigError(
            "loop.modules: 'imagination' needs imagine.ratio > 0 (no episode would be imagined)"
        )
    return cfg


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Applies ``section.key=value`` strings (values parsed as YAML) to a nested dict."""
    raw = {k: dict(v or {}) for k, v in raw.items()}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected section.key=value")
        dotted, text = item.split("=", 1)
        parts = dotted.strip().split(".")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"override {item!r}: expected section.key=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        raw.setdefault(parts[0], {})[parts[1]] = value
    return raw


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> Config:
    """Reads a YAML preset (or the defaults when ``path`` is None) and applies overrides.

    Raises:
        ConfigError: missing or unparseable file, or any error of :func:`config_from_dict`.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    return config_from_dict(apply_overrides(raw, overrides))
