"""``python -m serl_jax.benchmark`` end to end at the tiny preset: cells, a kill and a
resume that recomputes nothing finished, the table's statistics, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from serl_jax import evaluate
from serl_jax.benchmark import rows, tables
from serl_jax.benchmark.__main__ import main
from serl_jax.benchmark.cells import CellStore, SplitOrders
from serl_jax.benchmark.tables import dataset_results
from serl_jax.metrics import OrderOutcomes, price_advantage

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _cells(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in out.glob("cells/*/*/*/cell.json")}


@pytest.mark.slow
def test_benchmark_killed_and_resumed_recomputes_nothing_finished(tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench"
    args = ["--suite", "samples", "--config", TINY, "--seeds", "2", "--rows", "ppo", "--out",
            str(out)]  # fmt: skip
    real = rows.ppo_orders
    calls: list[tuple[str, int]] = []

    def killed_on_the_third(cfg, *a, **k):
        if len(calls) == 2:
            raise KeyboardInterrupt  # as a kill: nothing after it runs
        calls.append((cfg.loop.market, cfg.run.seed))
        return real(cfg, *a, **k)

    monkeypatch.setattr(rows, "ppo_orders", killed_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        main(args)
    before = _cells(out)
    # cn_1min: baselines and both PPO seeds; us_1min: baselines, then the kill
    assert len(before) == 4 and not (out / "results.md").exists()

    calls.clear()
    monkeypatch.setattr(rows, "ppo_orders", lambda cfg, *a, **k: (calls.append(
        (cfg.loop.market, cfg.run.seed)), real(cfg, *a, **k))[1])  # fmt: skip
    assert main(["--resume", str(out)]) == 0
    assert calls == [("sample:us_1min", 0), ("sample:us_1min", 1)]
    after = _cells(out)
    assert len(after) == 6 and all(after[p] == t for p, t in before.items())

    results = json.loads((out / "results.json").read_text())
    cn = results["datasets"]["cn_1min"]["splits"]
    assert list(cn) == ["test", "heldout", "test@propagator", "val"]
    ppo = cn["test"]["rows"]["PPO"]
    # the same test orders in the propagator market: own impact costs, no oracle there
    in_propagator = cn["test@propagator"]["rows"]
    assert in_propagator["PPO"]["metrics"]["n_orders"] == 60
    assert "oracle (not achievable)" not in in_propagator and "VWAP" in in_propagator
    # the propagator market's optimal static schedule is a row of that split only
    assert in_propagator["optimal static"]["metrics"]["n_orders"] == 30
    assert "optimal static" not in cn["test"]["rows"]
    shortfall = in_propagator["VWAP"]["metrics"]["shortfall_vs_TWAP"]["value"]
    assert shortfall != cn["test"]["rows"]["VWAP"]["metrics"]["shortfall_vs_TWAP"]["value"]
    # 30 test orders (3 symbols x 10 days) per seed, pooled over the 2 seeds
    assert ppo["metrics"]["n_orders"] == 60 and len(ppo["pa_vs_twap_per_seed"]) == 2
    assert ppo["metrics"]["interval"] == {"method": "cluster-robust t", "days": 10,
                                          "confidence": 0.95}  # fmt: skip
    held = cn["heldout"]["rows"]["PPO"]["metrics"]
    # SZ000002's 10 test days: one order a day, but the two seeds' orders share each day
    assert held["n_orders"] == 20 and held["interval"]["method"] == "cluster-robust t"
    assert cn["heldout"]["rows"]["VWAP"]["metrics"]["interval"]["method"] == "order bootstrap"
    assert np.mean(ppo["pa_vs_twap_per_seed"]) == pytest.approx(ppo["metrics"]["vs_TWAP"]["value"])
    text = (out / "results.md").read_text()
    assert "### test days, held-out symbols: 10 orders, 1 symbols, 10 days" in text
    assert "cluster-robust t interval by day (G = 10 days, 9 df" in text
    assert (out / "results.png").stat().st_size > 10_000
    assert "# Benchmark: samples" in capsys.readouterr().out

    # the cell's checkpoint scores the held-out symbol as the table says
    checkpoint = out / "cells" / "cn_1min" / "ppo" / "seed0" / "checkpoint"
    code = evaluate.main(
        ["--data", "sample:cn_1min", "--policy", str(checkpoint), "--split", "heldout",
         "data.heldout_symbols=[SZ000002]", "--json"]
    )  # fmt: skip
    assert code == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    orders, _ = CellStore(out).read("cn_1min", "ppo", 0)
    stored = price_advantage(orders["heldout"]["PPO"].outcomes).mean()
    assert record["PA"]["value"] == pytest.approx(stored, abs=1e-6)


@pytest.mark.slow
def test_benchmark_serl_cell_resumes_its_loop(tmp_path):
    """An SE-RL cell whose loop finished but whose cell was not stored (a kill between
    the two) resumes the loop's own store: no candidate is proposed or trained again."""
    out = tmp_path / "bench"
    args = ["--data", "sample:us_1min", "--config", TINY, "--seeds", "1", "--rows",
            "serl-offline", "--out", str(out), "loop.iterations=1",
            "loop.candidates=1"]  # fmt: skip
    assert main(args) == 0
    cell = out / "cells" / "us_1min" / "serl-offline" / "seed0"
    record = json.loads((cell / "cell.json").read_text())
    assert record["best"] in ("j0-default", "j1-c0")
    candidates = sorted(p.name for p in (cell / "serl-run" / "candidates").iterdir())
    assert candidates == ["j0-default", "j1-c0"]
    (cell / "cell.json").unlink()
    assert main(["--resume", str(out)]) == 0
    again = json.loads((cell / "cell.json").read_text())
    assert again["best"] == record["best"] and again["candidates"] == record["candidates"]
    assert sorted(p.name for p in (cell / "serl-run" / "candidates").iterdir()) == candidates


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--suite", "paper", "--data-root", "/nonexistent"], "--suite paper reads cn_index_1min"),
        (["--suite", "samples", "--rows", "ppo,bogus"], "--rows: unknown bogus"),
        (["--data", "sample:us_1min", "--suite", "samples"], "--data and --suite: give one"),
        (["--resume", "/nonexistent"], "not a benchmark run folder"),
        (["--data", "sample:us_1min", "data.heldout_symbols=[XYZ]"], "names XYZ, not in"),
    ],
)
def test_bad_input_is_one_line(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "b")] if "--resume" not in argv else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "b").exists()  # bad input leaves no run folder


@pytest.mark.slow
def test_benchmark_agents_rows_pair_each_agent_with_twap_in_the_same_market(tmp_path):
    """Two agents in the dynamic market (the ablation's agents rows): each agent and the
    team are paired with every agent running TWAP in the same market."""
    out = tmp_path / "bench"
    args = ["--data", "sample:us_1min", "--config", TINY, "--seeds", "1", "--ablations",
            "--rows", "agents-2", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    agents = results["datasets"]["us_1min"]["agents"]
    assert set(agents) == {"IPPO, 2 agents"}
    two = agents["IPPO, 2 agents"]["test"]["who"]
    assert set(two) == {"agent 0", "agent 1", "team"}
    # the team pools both agents' fills: its PA is their executed-weighted mean
    orders, _ = CellStore(out).read("us_1min", "agents-2", 0)
    a, b = (orders["test"][f"agent {i}"].outcomes for i in range(2))
    team_price = (a.notional + b.notional) / (a.executed + b.executed)
    team_pa = a.side * (team_price / a.benchmark - 1.0) * 1e4
    assert two["team"]["PA"]["value"] == pytest.approx(team_pa.mean())
    assert two["team"]["n_orders"] == 4
    assert "### Several agents (dynamic market" in (out / "results.md").read_text()


def test_every_row_of_the_paper_suite_configures_with_the_gpu_preset():
    """``--suite paper --config configs/gpu.yaml --ablations``: every cell's config is
    valid (the run checks them all before it trains anything)."""
    from serl_jax.benchmark.run import Plan
    from serl_jax.benchmark.suites import ABLATION_ROWS, AGENT_ROWS, MAIN_ROWS, PAPER_DATASETS

    plan = Plan(
        "paper",
        PAPER_DATASETS,
        (*MAIN_ROWS, *ABLATION_ROWS, *AGENT_ROWS),
        (0, 1, 2),
        config=str(ROOT / "configs" / "gpu.yaml"),
    )
    for dataset in plan.datasets:
        for row in plan.rows:
            cfg = plan.cfg(dataset, *row.overrides, "run.seed=2")
            assert cfg.ppo.num_envs == 4096 and cfg.loop.market == dataset.path
    xsec = plan.cfg(PAPER_DATASETS[1])
    assert (xsec.data.heldout_fraction, xsec.data.short_days) == (0.2, "error")


def test_the_plan_adds_a_designer_row_and_its_dek_ablations(tmp_path, monkeypatch):
    """``--llm SPEC`` adds the loop with that designer; ``--ablations`` adds it with the
    DEK off and, for a local ``hf:`` model (LoRA needs its weights), at the low level."""
    import argparse

    from serl_jax.benchmark.__main__ import _plan

    def plan(*extra):
        args = argparse.Namespace(
            seeds=3, data=["sample:us_1min"], suite=None, data_root=None, rows=None,
            config=None, overrides=[], argv=[], llm=None, ablations=False,
        )  # fmt: skip
        for key, value in extra:
            setattr(args, key, value)
        return {r.key: r for r in _plan(args).rows}

    assert "serl-llm" not in plan()
    rows = plan(("llm", "openai:http://localhost:8000/v1"), ("ablations", True))
    assert rows["serl-llm"].overrides[1] == 'loop.llm="openai:http://localhost:8000/v1"'
    assert 'dek.level="off"' in rows["serl-llm-dek-off"].overrides
    assert "serl-llm-dek-low" not in rows and {"agents-1", "agents-2"} <= set(rows)
    rows = plan(("llm", "hf:/models/qwen.gguf"), ("ablations", True))
    assert 'dek.level="low"' in rows["serl-llm-dek-low"].overrides


def _orders(pa_bps: list[float], days: list[str]) -> SplitOrders:
    """Sell orders of 100 shares at a benchmark of 100 whose PA is ``pa_bps``, replayed
    at the benchmark price (timing 0, so shortfall = PA)."""
    n = len(pa_bps)
    notional = 100 * 100.0 * (1 + np.asarray(pa_bps) / 1e4)
    outcomes = OrderOutcomes(
        side=np.ones(n), quantity=np.full(n, 100.0), executed=np.full(n, 100.0),
        notional=notional, benchmark=np.full(n, 100.0), replayed_notional=np.full(n, 1e4),
    )  # fmt: skip
    return SplitOrders(outcomes, ["X"] * n, days)


def test_every_other_serl_row_is_paired_with_serl_offline(tmp_path):
    """Paired tables by hand: 4 days x 2 orders; the model's row and a DEK ablation are
    paired with SE-RL offline (the designer library), PPO and SE-RL offline are not."""
    days = [f"2024-01-0{d}" for d in (1, 1, 2, 2, 3, 3, 4, 4)]
    store = CellStore(tmp_path)
    store.write("d", "baselines", None, {"test": {"TWAP": _orders([0.0] * 8, days)}}, {})
    pa = {
        ("ppo", "PPO"): [1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 1.0, 0.0],
        ("serl-offline", "SE-RL offline"): [1.5, 2.0, 0.5, 1.0, 2.0, 3.5, 1.0, 0.5],
        ("serl-llm", "SE-RL hf:m"): [2.5, 2.0, 0.5, 2.0, 3.0, 3.5, 1.0, 1.5],
        ("serl-dek-off", "SE-RL offline, DEK off"): [1.5, 1.0, 0.5, 1.0, 2.0, 3.5, 1.0, 0.5],
    }
    for (key, name), values in pa.items():
        store.write("d", key, 0, {"test": {name: _orders(values, days)}}, {})
    boot = {"confidence": 0.95, "n_bootstrap": 200, "seed": 0}
    split = dataset_results(store, "d", list(pa), [0], boot)["test"]

    designer = split["vs_designer"]
    assert designer["reference"] == "SE-RL offline"
    assert list(designer["rows"]) == ["SE-RL hf:m", "SE-RL offline, DEK off"]
    # the model's orders minus the library's: 1, 0, 0, 1, 1, 0, 0, 1 -> mean 0.5
    model = designer["rows"]["SE-RL hf:m"]
    assert model["pa"]["value"] == pytest.approx(0.5)
    assert model["shortfall"]["value"] == pytest.approx(0.5)
    assert designer["rows"]["SE-RL offline, DEK off"]["pa"]["value"] == pytest.approx(-1 / 8)
    assert split["vs_PPO"]["SE-RL hf:m"]["pa"]["value"] == pytest.approx(
        np.mean(np.subtract(pa["serl-llm", "SE-RL hf:m"], pa["ppo", "PPO"]))
    )
    text = "\n".join(tables._footer_md(split))
    assert "Paired with SE-RL offline, the designer library (same seeds, same orders):" in text
    assert "| policy − offline | PA (bps) | MDE | shortfall (bps) | MDE |" in text
    assert "| SE-RL hf:m | +0.50 [" in text

    without = [(k, n) for k, n in pa if k != "serl-offline"]
    split = dataset_results(store, "d", without, [0], boot)["test"]
    assert split["vs_designer"]["rows"] == {}
    assert "designer library" not in "\n".join(tables._footer_md(split))


def test_the_printed_results_page_fits_120_columns_and_wide_shows_every_column(tmp_path):
    """A dataset's split from stored cells (TWAP, and PPO with 2 seeds on 30 orders over
    10 days): the printed page's table fits 120 columns and names what it leaves out;
    ``wide`` shows every column; ``results.md`` keeps its full markdown table."""
    rng = np.random.default_rng(3)
    days = [f"2024-01-{d:02d}" for d in range(1, 11) for _ in range(3)]
    store = CellStore(tmp_path)
    twap = _orders(list(rng.normal(0.0, 5.0, 30)), days)
    store.write("d", "baselines", None, {"test": {"TWAP": twap}}, {})
    for seed in (0, 1):
        ppo = _orders(list(rng.normal(1.0, 5.0, 30)), days)
        store.write("d", "ppo", seed, {"test": {"PPO": ppo}}, {})
    boot = {"confidence": 0.95, "n_bootstrap": 200, "seed": 0}
    split = dataset_results(store, "d", [("ppo", "PPO")], [0, 1], boot)["test"]
    meta = {
        "suite": "custom", "date": "2024-02-01 00:00 UTC", "machine": "test", "seeds": [0, 1],
        "run_seconds": 60.0, "peak_rss_gb": 1.0, "command": "python -m serl_jax.benchmark",
    }  # fmt: skip
    results = {"meta": meta, "datasets": {"d": {"path": "d", "why": "a test", "splits": {}}}}
    results["datasets"]["d"]["splits"]["test"] = split

    def table(text: str) -> list[str]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("### test days"))
        end = next(i for i, line in enumerate(lines) if line.startswith("Intervals:"))
        return lines[start + 1 : end]

    compact = table(tables.results_text(results))
    assert max(len(line) for line in compact) <= 120
    assert "PA-TWAP per seed" not in "\n".join(compact[:3])
    assert any(line.split()[:1] == ["PPO"] for line in compact)
    assert "Not shown (--wide shows every column): PA-TWAP per seed" in " ".join(compact)
    wide = table(tables.results_text(results, wide=True))
    header = " ".join(wide[:3])
    for title in ("PA (bps)", "PA-std (bps)", "WR", "GLR", "AFI", "n", "MDE", "won",
                  "shortfall-TWAP (bps)", "PA-TWAP per seed"):  # fmt: skip
        assert title in header, title
    seeds = split["rows"]["PPO"]["pa_vs_twap_per_seed"]
    ppo_row = next(line for line in wide if line.startswith("PPO"))
    assert ppo_row.endswith(f"{seeds[0]:+.2f} / {seeds[1]:+.2f}")
    markdown = tables.results_markdown(results)
    assert (
        "| policy | PA (bps) | PA-std | WR | GLR | AFI | n | PA−TWAP (bps) | MDE | won " in markdown
    )


def test_the_propagator_preset_row_holds_the_presets_settings():
    """The ``ppo-propagator`` row's overrides are ``configs/propagator.yaml``'s settings,
    every one of them, with their values."""
    import yaml

    from serl_jax.benchmark.suites import PROPAGATOR_PRESET

    preset = yaml.safe_load((ROOT / "configs" / "propagator.yaml").read_text())
    flat = {f"{section}.{key}": v for section, keys in preset.items() for key, v in keys.items()}
    given = dict(o.split("=", 1) for o in PROPAGATOR_PRESET)
    assert set(given) == set(flat)
    assert all(yaml.safe_load(given[k]) == flat[k] for k in flat)


@pytest.mark.slow
def test_the_propagator_preset_row_trains_in_the_propagator(tmp_path, monkeypatch):
    """``ppo-propagator`` trains in the propagator market alone, on the mean-variance
    reward (``loop.score``), keeps its seed on the propagator's validation days, and is
    rolled out on the replayed and propagator test days."""
    from serl_jax.benchmark import __main__ as bench
    from serl_jax.benchmark.suites import Row
    from serl_jax.envs.execution import mean_variance_reward
    from serl_jax.envs.propagator import PropagatorEnvParams, PropagatorExecutionEnv

    row = next(r for r in bench.ABLATION_ROWS if r.key == "ppo-propagator")
    tiny = tuple(o for o in row.overrides if not o.startswith("ppo.total_timesteps="))
    monkeypatch.setattr(bench, "ABLATION_ROWS", (Row(row.key, row.name, row.kind, tiny),))
    seen = []
    real = rows.train_policy

    def recording(cfg, env, train_params, val_params, **kw):
        seen.append((env, train_params, val_params, kw))
        return real(cfg, env, train_params, val_params, **kw)

    monkeypatch.setattr(rows, "train_policy", recording)
    out = tmp_path / "bench"
    args = ["--data", "sample:us_1min", "--config", TINY, "--seeds", "1", "--ablations",
            "--rows", "ppo-propagator", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    ((env, train_params, val_params, kw),) = seen
    assert isinstance(env, PropagatorExecutionEnv) and env.reward_fn is mean_variance_reward
    assert isinstance(train_params, PropagatorEnvParams)
    assert isinstance(val_params, PropagatorEnvParams) and "hybrid" not in kw
    splits = json.loads((out / "results.json").read_text())["datasets"]["us_1min"]["splits"]
    n = [splits[s]["rows"]["PPO, propagator preset"]["metrics"]["n_orders"] for s in splits]
    assert list(splits) == ["test", "test@propagator", "val"] and n[0] == n[1] > 0
