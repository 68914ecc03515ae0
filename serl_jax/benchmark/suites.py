"""What the benchmark runs: datasets with their splits, and the rows of its table.

The paper suite (``--suite paper``) is the three large real sets of the shared data folder,
with these documented choices, fixed before any result was seen:

* ``cn_index_1min`` (SSE Composite, 999 days after the circuit-breaker day 2016-01-07 of
  17 bars is dropped): chronological 60/20/20, so ~200 test days of one order each;
* ``cn_xsec_1min`` (100 A-shares x 9 days): 20 of the 100 symbols held out whole (drawn
  with seed 0), the others split 5/1/3 days: test days on the 80 training symbols and on
  the 20 held-out ones are separate rows;
* ``us_2022_1min`` (SPY, QQQ, AMD, NVDA, TSLA): the cut-short last day of each window
  dropped, chronological 60/20/20 per symbol.

The sample suite (``--suite samples``) runs the shipped samples (one cn symbol held out),
in seconds at the tiny preset; ``--data PATH`` adds any dataset with the config's splits.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

__all__ = [
    "ABLATION_ROWS",
    "AGENT_ROWS",
    "DATA_ROOT_ENV",
    "DISCRETE_SET",
    "MAIN_ROWS",
    "PAPER_DATASETS",
    "PROPAGATOR_PRESET",
    "SAMPLE_DATASETS",
    "Dataset",
    "Row",
    "custom_dataset",
    "default_data_root",
    "llm_row",
    "suite_datasets",
]

DATA_ROOT_ENV = "SERL_DATA_ROOT"
"""Environment variable naming the folder that holds the paper suite's sets."""
DISCRETE_SET = "[0, 0.5, 1, 1.5, 2]"
"""The discrete action set of the ``PPO discrete`` row (chosen on validation days,
docs/results/learning-variants.md, "A discrete action set")."""


PROPAGATOR_PRESET = (
    "loop.score=mean_variance",
    "network.action_prior=twap",
    "network.prior_anchor_steps=1000000.0",
    "ppo.gae_lambda=1.0",
    "ppo.total_timesteps=6144000",
)
"""The settings of ``configs/propagator.yaml`` as overrides (a test keeps them equal): the
``PPO, propagator preset`` row trains with them in the propagator market alone, where
they were chosen on the index's validation days (docs: The impact market)."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One dataset of a benchmark run.

    Attributes:
        name: the name in tables and folder names.
        path: a folder or file in the loader's format, or ``sample:<name>``.
        overrides: ``data.*`` settings (splits, held-out symbols, short days) as
            ``section.key=value`` strings, applied over the run's config.
        why: the documented reason for those settings.
    """

    name: str
    path: str
    overrides: tuple[str, ...] = ()
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: a policy the benchmark trains (or the baselines).

    Attributes:
        key: short name, the cell folder's name and a ``--rows`` value.
        name: the table's name.
        kind: ``baselines`` (seed-independent, one cell per dataset), ``ppo`` (plain PPO,
            ``--llm none``), ``serl`` (the SE-RL loop; its best candidate is the row) or
            ``agents`` (IPPO/MAPPO agents in the dynamic market, their own table).
        overrides: settings of this row over the dataset's config.
        ablation: the row belongs to the ablation table (``--ablations``).
    """

    key: str
    name: str
    kind: str
    overrides: tuple[str, ...] = ()
    ablation: bool = False


PAPER_DATASETS = (
    Dataset(
        "cn_index_1min",
        "cn_index_1min",
        ("data.short_days=drop",),
        "one long history: chronological 60/20/20 gives ~200 test days of one order each; "
        "the 17-bar circuit-breaker day 2016-01-07 is dropped",
    ),
    Dataset(
        "cn_xsec_1min",
        "cn_xsec_1min",
        ("data.heldout_fraction=0.2", "data.heldout_seed=0"),
        "a cross-section: 20 of 100 symbols held out whole (seed 0); each symbol's 9 days "
        "split 5/1/3; test days on training and on held-out symbols reported apart",
    ),
    Dataset(
        "us_2022_1min",
        "us_2022_1min",
        ("data.short_days=drop",),
        "five symbols over six two-week windows: the cut-short last day of each window "
        "dropped, each symbol's days split 60/20/20",
    ),
)
SAMPLE_DATASETS = (
    Dataset(
        "cn_1min",
        "sample:cn_1min",
        ("data.heldout_symbols=[SZ000002]",),
        "the shipped A-share sample; SZ000002 held out",
    ),
    Dataset("us_1min", "sample:us_1min", (), "the shipped US sample (5 days: 3/1/1)"),
)

STATIC = ("market.mode=static", "loop.llm=none")
MAIN_ROWS = (
    Row("baselines", "baselines", "baselines"),
    Row("ppo", "PPO", "ppo", STATIC),
    Row(
        "ppo-discrete", "PPO discrete", "ppo", (*STATIC, f"network.action_multiples={DISCRETE_SET}")
    ),
    Row("ppo-hybrid", "PPO hybrid", "ppo", ("market.mode=hybrid", "loop.llm=none")),
    Row("serl-offline", "SE-RL offline", "serl", ("market.mode=static", "loop.llm=offline")),
)
ABLATION_ROWS = (
    Row(
        "serl-dek-off",
        "SE-RL offline, DEK off",
        "serl",
        # quoted: YAML reads a bare off as false
        ("market.mode=static", "loop.llm=offline", 'dek.level="off"'),
        ablation=True,
    ),
    Row(
        "serl-score-pa",
        "SE-RL offline, loop.score=pa",
        "serl",
        ("market.mode=static", "loop.llm=offline", "loop.score=pa"),
        ablation=True,
    ),
    Row(
        "ppo-propagator",
        "PPO, propagator preset",
        "ppo",
        ("market.mode=dynamic", "market.simulator=propagator", "loop.llm=none", *PROPAGATOR_PRESET),
        ablation=True,
    ),  # fmt: skip
    Row(
        "ppo-imagined",
        "PPO, imagine.ratio=0.5",
        "ppo",
        (*STATIC, "imagine.program=volatility_scale", "imagine.ratio=0.5"),
        ablation=True,
    ),
)


AGENT_ROWS = tuple(
    Row(
        f"agents-{n}",
        f"IPPO, {n} agent{'s' if n > 1 else ''}",
        "agents",
        ("market.mode=dynamic", "loop.llm=none", f"marl.agents={n}"),
        ablation=True,
    )
    for n in (1, 2)
)
"""One agent against two in the multi-agent (dynamic) market, each agent with its own
parent order of the single-agent size; scored per agent and as a team (their fills
pooled) against every agent running TWAP in the same market."""


def llm_row(spec: str, dek: str = "high") -> Row:
    """The SE-RL row of a given designer (``--llm``), at DEK level ``dek``."""
    suffix = "" if dek == "high" else f", DEK {dek}"
    key = "serl-llm" if dek == "high" else f"serl-llm-dek-{dek}"
    return Row(
        key,
        f"SE-RL {spec}{suffix}",
        "serl",
        ("market.mode=static", f"loop.llm={json.dumps(spec)}", f'dek.level="{dek}"'),
        ablation=dek != "high",
    )


def default_data_root() -> Path:
    """``$SERL_DATA_ROOT``, else ``../shared/data`` beside the repository."""
    if os.environ.get(DATA_ROOT_ENV):
        return Path(os.environ[DATA_ROOT_ENV])
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def suite_datasets(suite: str, data_root: Path) -> tuple[Dataset, ...]:
    """The datasets of ``suite`` (``paper`` or ``samples``), paper paths under
    ``data_root``.

    Raises:
        ValueError: an unknown suite, or a paper set missing under ``data_root`` (one
            line naming it and what to pass instead).
    """
    if suite == "samples":
        return SAMPLE_DATASETS
    if suite != "paper":
        raise ValueError(f"--suite: expected paper or samples, got {suite!r}")
    missing = [d.path for d in PAPER_DATASETS if not (data_root / d.path).is_dir()]
    if missing:
        raise ValueError(
            f"--suite paper reads {', '.join(d.path for d in PAPER_DATASETS)} under "
            f"{data_root}: {', '.join(missing)} not found; pass --data-root DIR (or set "
            f"${DATA_ROOT_ENV}), --suite samples, or --data PATH"
        )
    return tuple(dataclasses.replace(d, path=str(data_root / d.path)) for d in PAPER_DATASETS)


def custom_dataset(path: str) -> Dataset:
    """A ``--data PATH`` dataset: the config's own splits; named after the folder or
    file (``sample:<name>`` after the sample)."""
    name = path.split(":", 1)[1] if path.startswith("sample:") else Path(path).name
    for suffix in (".csv.gz", ".csv", ".parquet", ".pq"):
        name = name.removesuffix(suffix)
    return Dataset(name or "data", path, (), "the config's data settings")
