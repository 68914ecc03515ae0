"""End-to-end CLI runs at the tiny preset: train, evaluate a checkpoint, bad input."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import serl_jax.training.ppo
from serl_jax import evaluate, train
from serl_jax.data import sample_path

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One plain-PPO ``python -m serl_jax.train --llm none`` run on the US sample (tiny)."""
    out = tmp_path_factory.mktemp("runs")
    code = train.main(
        [
            "--config",
            TINY,
            "--out",
            str(out),
            "--quiet",
            "--data",
            "sample:us_1min",
            "--llm",
            "none",
        ]
    )
    assert code == 0
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return run_dir


def test_train_writes_a_complete_run_folder(tiny_run):
    market = tiny_run / "us_1min"
    for name in ("config.yaml", "metrics.json", "results.txt"):
        assert (tiny_run / name).is_file(), name
    for name in ("training_curve.png", "trajectories.png", "pa_distribution.png"):
        assert (market / name).stat().st_size > 1000, name
    assert (market / "checkpoint" / "policy.msgpack").is_file()
    report = json.loads((tiny_run / "metrics.json").read_text())
    entry = report["markets"]["us_1min"]
    names = {
        "PPO", "PPO-static", "TWAP", "TWAP-POV", "VWAP", "adaptive VWAP", "POV", "AC", "Immediate"
    }  # fmt: skip
    # hybrid (the default) trains PPO-static too; the oracle bounds the static market only
    assert set(entry["policies"]) == names | {"oracle (not achievable)"}
    assert set(entry["policies_dynamic"]) == names
    assert entry["market_mode"] == "hybrid"
    last = entry["curves_last"]
    assert last["alpha"] + last["beta"] == pytest.approx(1.0)
    assert 0.1 <= last["alpha"] <= 0.9
    assert entry["data"]["episodes"] == {"train": 12, "val": 4, "test": 4}
    for name, metrics in entry["policies"].items():
        assert metrics["n_orders"] == 4
        assert metrics["AFI"]["value"] == 0.0  # forced liquidation fills everything
        # every policy but TWAP is compared with TWAP on the same orders
        assert ("vs_TWAP" in metrics) == (name != "TWAP")
    ppo = entry["policies"]["PPO"]
    assert set(ppo["vs_TWAP"]) == {"value", "ci_low", "ci_high", "win_rate", "mde"}
    assert ppo["vs_TWAP"]["value"] == pytest.approx(
        ppo["PA"]["value"] - entry["policies"]["TWAP"]["PA"]["value"], abs=1e-9
    )
    assert entry["timing"]["compile_seconds"] > 0
    assert len(entry["selection"]["validation_pa_per_seed"]) == 2
    results = (tiny_run / "results.txt").read_text()
    assert "us_1min static" in results and "us_1min dynamic" in results
    # the file keeps every column, those the printed table leaves out too (serl_jax.cli)
    header = results.splitlines()[0].split()
    assert header[:2] == ["market", "policy"] and {"AFI", "n", "MDE", "won"} <= set(header)


def test_static_training_needs_no_calibrated_market(tmp_path, capsys):
    """A market given as a path has no shipped calibration: the static mode trains and
    scores in the static market only; the hybrid mode with the order book stops before
    training and says how to calibrate (the propagator, the default, needs none). A
    second run gives the same metrics (the run is deterministic; the hybrid trainer's
    determinism is tested in ``tests/test_hybrid.py``)."""
    data = str(sample_path("us_1min"))
    args = ["--config", TINY, "--out", str(tmp_path), "--quiet", "--data", data, "--llm", "none"]
    assert train.main(args + ["--env", "hybrid", "market.simulator=lob"]) == 2
    assert "python -m serl_jax.calibrate" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert train.main(args + ["--env", "static"]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    (entry,) = json.loads((run_dir / "metrics.json").read_text())["markets"].values()
    assert entry["market_mode"] == "static"
    assert set(entry["policies"]) == {
        "PPO", "TWAP", "TWAP-POV", "VWAP", "adaptive VWAP", "POV", "AC", "Immediate",
        "oracle (not achievable)",
    }  # fmt: skip
    assert "policies_dynamic" not in entry
    assert " dynamic" not in (run_dir / "results.txt").read_text()
    assert train.main(args[:3] + [str(tmp_path / "again")] + args[4:] + ["--env", "static"]) == 0
    (other,) = [p for p in (tmp_path / "again").iterdir() if not p.name.startswith(".")]
    (second,) = json.loads((other / "metrics.json").read_text())["markets"].values()
    assert second["policies"] == entry["policies"]
    assert second["selection"] == entry["selection"]


def test_train_by_policy_distillation(tmp_path):
    """``ppo.distill_coef > 0`` trains a teacher first and records it in metrics.json;
    without ``--env static`` it is a one-line error."""
    args = [
        "--config", TINY, "--out", str(tmp_path), "--quiet", "--data", "sample:us_1min",
        "--llm", "none", "ppo.distill_coef=1.0", "run.num_seeds=1", "ppo.total_timesteps=1024",
        "ppo.distill_teacher=honest",
    ]  # fmt: skip
    assert train.main(args) == 2
    assert train.main(args + ["--env", "static"]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    (entry,) = json.loads((run_dir / "metrics.json").read_text())["markets"].values()
    distillation = entry["distillation"]
    assert distillation["distill_coef"] == 1.0
    assert distillation["distill_teacher"] == "honest"
    assert distillation["teacher_env_steps"] == 1024
    (shortfall,) = distillation["teacher"]["validation_shortfall_per_seed"]
    assert math.isfinite(shortfall)


def test_a_discrete_action_set_trains_and_evaluates(tmp_path, capsys):
    """``network.action_multiples`` trains a categorical policy; its checkpoint rebuilds
    the same policy in ``python -m serl_jax.evaluate`` (same PA on the same test days)."""
    args = [
        "--config", TINY, "--out", str(tmp_path), "--quiet", "--data", "sample:us_1min",
        "--llm", "none", "--env", "static", "run.num_seeds=1", "ppo.total_timesteps=1024",
        "network.action_multiples=[0, 0.5, 1, 2]",
    ]  # fmt: skip
    assert train.main(args) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    checkpoint = run_dir / "us_1min" / "checkpoint"
    saved = json.loads((checkpoint / "policy.json").read_text())["config"]["network"]
    assert saved["action_multiples"] == [0.0, 0.5, 1.0, 2.0]
    capsys.readouterr()
    assert evaluate.main(["--data", "sample:us_1min", "--policy", str(checkpoint), "--json"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    trained = json.loads((run_dir / "metrics.json").read_text())["markets"]["us_1min"]
    assert record["PA"]["value"] == pytest.approx(
        trained["policies"]["PPO"]["PA"]["value"], abs=1e-6
    )


def test_evaluate_in_the_dynamic_market(capsys):
    code = evaluate.main(
        ["--data", "sample:cn_1min", "--env", "dynamic", "--json", "market.simulator=lob"]
        + ["--policy", "twap", "--policy", "immediate"]
    )
    assert code == 0
    records = {r["policy"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    # Selling everything at once costs far more in the book, which has no participation cap.
    assert records["Immediate"]["PA"]["value"] < records["TWAP"]["PA"]["value"]
    code = evaluate.main(["--data", str(ROOT / "configs"), "--env", "dynamic"])
    assert code == 2
    code = evaluate.main(["--data", "sample:cn_1min", "--env", "dynamic", "--policy", "oracle"])
    assert code == 2 and "static market" in capsys.readouterr().err


def test_evaluate_checkpoint_and_baselines_as_json(tiny_run, capsys):
    checkpoint = str(tiny_run / "us_1min" / "checkpoint")
    code = evaluate.main(
        ["--data", "sample:us_1min", "--policy", "twap", "--policy", checkpoint, "--json"]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["policy"] for r in records] == ["TWAP", f"PPO:{checkpoint}"]
    for r in records:
        assert set(r) >= {"policy", "PA", "PA_std", "WR", "GLR", "AFI", "n_orders"}
        assert r["n_orders"] == 4
    assert "vs_TWAP" not in records[0]
    assert set(records[1]["vs_TWAP"]) == {"value", "ci_low", "ci_high", "win_rate", "mde"}
    # 4 test orders of 4 symbols on one day: no interval, and the record says why
    assert records[1]["interval"] == {"method": "none (one day)", "days": 1, "confidence": 0.95}
    assert records[1]["vs_TWAP"]["ci_low"] is None and records[1]["vs_TWAP"]["mde"] is None
    # The checkpoint scores the same on the same test days as in the training run.
    trained = json.loads((tiny_run / "metrics.json").read_text())["markets"]["us_1min"]
    assert records[1]["PA"]["value"] == pytest.approx(
        trained["policies"]["PPO"]["PA"]["value"], abs=1e-6
    )


def test_evaluate_refuses_a_checkpoint_with_other_child_orders(tiny_run, capsys):
    """The action means a different child order under another env.child_quantity (or
    env.step_minutes)."""
    checkpoint = str(tiny_run / "us_1min" / "checkpoint")
    code = evaluate.main(
        ["--data", "sample:us_1min", "--policy", checkpoint, "env.child_quantity=fixed"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "trained with env.child_quantity=participation" in err
    assert "\n" not in err.strip()
    # and the decision interval: the action is held for another number of minutes
    code = evaluate.main(
        ["--data", "sample:us_1min", "--policy", checkpoint, "market.mode=static",
         "env.step_minutes=5"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "trained with env.step_minutes=1, this evaluation uses 5" in err


def test_evaluate_split_all_counts_every_day(capsys):
    assert (
        evaluate.main(["--data", "sample:us_1min", "--split", "all", "--policy", "vwap", "--json"])
        == 0
    )
    (record,) = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert record["n_orders"] == 20  # 4 symbols x 5 days
    # TWAP was rolled out for the paired comparison although it was not asked for
    assert record["vs_TWAP"]["win_rate"] is not None


def test_evaluate_the_new_baselines_by_name(capsys):
    args = ["--data", "sample:us_1min", "--json"]
    for name in ("pov", "avwap", "twap-pov", "oracle"):
        args += ["--policy", name]
    assert evaluate.main(args) == 0
    records = {r["policy"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(records) == {"POV", "adaptive VWAP", "TWAP-POV", "oracle (not achievable)"}
    oracle = records["oracle (not achievable)"]["shortfall_vs_TWAP"]
    for name in ("POV", "adaptive VWAP", "TWAP-POV"):  # nobody pays less spread and impact
        assert records[name]["shortfall_vs_TWAP"]["value"] <= oracle["value"]


def test_bad_data_is_a_one_line_error_and_exit_2(tmp_path):
    bad = tmp_path / "AAA.csv"
    bad.write_text("datetime,close,volume\n2019-01-02 09:31:00,-1,100\n")
    result = subprocess.run(
        [sys.executable, "-m", "serl_jax.evaluate", "--data", str(bad), "--policy", "twap"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "AAA.csv" in result.stderr
    assert "Traceback" not in result.stderr


def test_train_rejects_bad_config_without_creating_a_run(tmp_path, capsys):
    assert train.main(["--out", str(tmp_path), "ppo.num_envs=0"]) == 2
    assert "ppo.num_envs" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_interrupted_run_leaves_no_folder_that_looks_complete(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(serl_jax.training.ppo, "run_market", crash)
    with pytest.raises(KeyboardInterrupt):
        train.main(
            ["--config", TINY, "--out", str(tmp_path), "--quiet", "--data", "sample:us_1min"]
            + ["--llm", "none"]
        )
    (staged,) = list(tmp_path.iterdir())
    assert staged.name.startswith(".") and staged.name.endswith(".incomplete")
    assert (staged / "config.yaml").is_file() and not (staged / "metrics.json").exists()


def test_train_logs_one_load_line_unless_verbose(tmp_path, monkeypatch, capsys):
    """The load report is one line however many symbols; --verbose lists each symbol."""

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(serl_jax.training.ppo, "run_market", stop)
    base = ["--config", TINY, "--data", "sample:us_1min", "--llm", "none"]
    for flags, lines in (([], 0), (["--verbose"], 4)):
        with pytest.raises(KeyboardInterrupt):
            train.main([*base, "--out", str(tmp_path / str(len(flags))), *flags])
        err = capsys.readouterr().err.splitlines()
        (summary,) = [line for line in err if line.startswith("[us_1min]") and "symbol(s)" in line]
        assert "4 symbol(s)" in summary
        assert len([line for line in err if ": filled" in line and line.startswith("  ")]) == lines


def test_train_with_an_imagination_program(tmp_path, capsys):
    """``imagine.program=<library name>``: validated, trained with half the episodes on
    imagined days, reported in metrics.json; an unknown or rejected program stops the run
    before any folder is made."""
    base = ["--config", TINY, "--out", str(tmp_path), "--quiet", "--data", "sample:us_1min"]
    base += ["--llm", "none", "--env", "static"]
    assert train.main([*base, "imagine.program=no_such_program"]) == 2
    assert "imagine.program" in capsys.readouterr().err and not any(tmp_path.iterdir())
    bad = tmp_path.parent / "zero_volume.py"
    bad.write_text("def imagine(key, price, volume, params):\n    return price, volume * 0.0\n")
    assert train.main([*base, f"imagine.program={bad}"]) == 2
    err = capsys.readouterr().err
    assert "rejected at stage runtime" in err and "total_volume" in err
    assert not any(tmp_path.iterdir())

    assert train.main([*base, "imagine.program=flash_dip", "imagine.ratio=0.5"]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    entry = json.loads((run_dir / "metrics.json").read_text())["markets"]["us_1min"]
    assert entry["imagination"]["program"] == "flash_dip"
    assert entry["imagination"]["imagined_share"] == 0.5
    # realized: the mean over 4 updates of k of 16 lanes (ppo.num_envs) on imagined days
    lanes = entry["imagination"]["lane_share"] * 16 * 4
    assert 0 <= lanes <= 64 and lanes == pytest.approx(round(lanes))
    assert entry["imagination"]["out_of_bounds"] == 0.0


def _new_symbols_one_day(folder: Path) -> Path:
    """One day of two symbols the checkpoint never saw: the US sample's last day of AAPL
    and MSFT, renamed."""
    import pandas as pd

    folder.mkdir()
    for old, new in (("AAPL", "NEWA"), ("MSFT", "NEWB")):
        frame = pd.read_csv(sample_path("us_1min") / f"{old}.csv.gz")
        day = pd.to_datetime(frame["datetime"]).dt.date
        frame.loc[day == day.max()].to_csv(folder / f"{new}.csv", index=False)
    return folder


def test_evaluate_split_all_takes_a_single_day_of_new_symbols(tiny_run, tmp_path, capsys):
    data = _new_symbols_one_day(tmp_path / "new")
    checkpoint = str(tiny_run / "us_1min" / "checkpoint")
    code = evaluate.main(
        ["--data", str(data), "--policy", "twap", "--policy", checkpoint, "--split", "all",
         "--json"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = [json.loads(line) for line in captured.out.strip().splitlines()]
    assert [r["n_orders"] for r in records] == [2, 2]
    assert records[1]["interval"]["days"] == 1 and records[1]["vs_TWAP"]["ci_low"] is None
    # the load is one line, and the in-sample statistics are said
    assert "2 symbol(s), 2 symbol-days x 390 minutes" in captured.err
    assert "statistics fitted on these days themselves" in captured.err


def test_evaluate_reports_the_held_out_symbols_test_days(capsys):
    code = evaluate.main(
        ["--data", "sample:cn_1min", "--policy", "twap", "--policy", "vwap", "--split",
         "heldout", "data.heldout_symbols=[SZ000002]", "--json"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    vwap = json.loads(captured.out.strip().splitlines()[1])
    # SZ000002's 10 test days, one order each: the order bootstrap is the day bootstrap
    assert vwap["n_orders"] == 10
    assert vwap["interval"] == {"method": "order bootstrap", "days": 10, "confidence": 0.95}
    code = evaluate.main(["--data", "sample:cn_1min", "--split", "heldout"])
    assert code == 2
    assert "no symbol is held out" in capsys.readouterr().err


_XLA_MEMORY_VARS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
)


@pytest.fixture
def no_xla_memory_vars(monkeypatch):
    """None of XLA's memory variables set; each restored afterwards (also those the code
    under test sets: setenv records the variable's absence, delenv alone does not)."""
    for name in _XLA_MEMORY_VARS:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(
    ("overrides", "fraction"),
    [
        # the default loop: one worker process (train_budget_s > 0) beside this one
        (["loop.llm=hf:qwen2.5-coder-1.5b"], "0.400"),
        (["loop.llm=hf:m.gguf", "loop.workers=3"], "0.200"),
        # candidates train in this process: one JAX process
        (["loop.llm=hf:m.gguf", "loop.train_budget_s=0"], "0.800"),
        # Ray actors train elsewhere
        (["loop.llm=hf:m.gguf", "loop.workers=4", "loop.executor=ray"], "0.800"),
        # no PyTorch model on the GPU: XLA's own limit
        (["loop.llm=hf:m.gguf", "loop.hf_device=cpu"], None),
        (["loop.llm=offline"], None),
    ],
)
def test_an_hf_designer_on_the_gpu_caps_each_jax_process(no_xla_memory_vars, overrides, fraction):
    from serl_jax.config import load_config
    from serl_jax.training.serl import share_accelerator

    share_accelerator(load_config(None, overrides).loop)
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert os.environ.get("XLA_CLIENT_MEM_FRACTION") == fraction


@pytest.mark.parametrize("name", ["XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"])
def test_a_users_memory_settings_win(no_xla_memory_vars, name):
    from serl_jax.config import load_config
    from serl_jax.training.serl import share_accelerator

    monkeypatch = no_xla_memory_vars
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    monkeypatch.setenv(name, "0.9")
    share_accelerator(load_config(None, ["loop.llm=hf:m.gguf"]).loop)
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    assert os.environ[name] == "0.9"
    # setting the other name as well would make jaxlib refuse to start
    other = ({"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"} - {name}).pop()
    assert other not in os.environ


# --------------------------------------------------------------------------------------
# Command lines: section.key=value overrides among the flags (serl_jax.cli)
# --------------------------------------------------------------------------------------


def test_train_takes_overrides_anywhere_among_its_flags(monkeypatch):
    """The command line of issue 50: an override after a flag that follows another
    override was "unrecognized"; the job itself is replaced, so nothing trains."""
    seen = {}

    def run_serl(cfg, name, resume, quiet, verbose=False, wide=False):
        seen.update(cfg=cfg, resume=resume, wide=wide)
        return 0

    monkeypatch.setattr(train, "run_serl", run_serl)
    monkeypatch.setattr(train, "share_accelerator", lambda loop: None)
    argv = ["--seed", "7", "loop.min_iterations=1", "--out", "runs", "loop.executor=ray"]
    assert train.main([*argv, "--wide", "loop.candidates=3"]) == 0
    cfg = seen["cfg"]
    assert (cfg.run.seed, cfg.run.out) == (7, "runs")
    assert (cfg.loop.min_iterations, cfg.loop.executor, cfg.loop.candidates) == (1, "ray", 3)
    assert seen["resume"] is None and seen["wide"] is True


def test_train_keeps_argparse_errors_with_mixed_overrides(capsys):
    with pytest.raises(SystemExit) as stop:
        train.main(["loop.min_iterations=1", "--seed", "seven", "loop.executor=ray"])
    assert stop.value.code == 2
    assert "argument --seed: invalid int value: 'seven'" in capsys.readouterr().err


def test_evaluate_takes_overrides_anywhere_among_its_flags(monkeypatch):
    seen = {}
    monkeypatch.setattr(evaluate, "_evaluate", lambda args: seen.update(vars(args)) or 0)
    argv = [
        "env.step_minutes=5", "--data", "sample:us_1min", "eval.n_bootstrap=100",
        "--policy", "twap", "--wide", "env.lookback=8", "--policy", "vwap", "--split", "all",
    ]  # fmt: skip
    assert evaluate.main(argv) == 0
    assert seen["overrides"] == ["env.step_minutes=5", "eval.n_bootstrap=100", "env.lookback=8"]
    assert seen["policy"] == ["twap", "vwap"]
    assert (seen["data"], seen["split"], seen["wide"], seen["json"]) == (
        "sample:us_1min", "all", True, False
    )  # fmt: skip


def test_benchmark_takes_overrides_anywhere_among_its_flags(tmp_path, monkeypatch, capsys):
    import serl_jax.benchmark.__main__ as benchmark

    plans = []

    def run_plan(plan, root, verbose=False):
        plans.append((plan, root))
        raise ValueError("stopped before any cell")

    monkeypatch.setattr(benchmark, "run_plan", run_plan)
    out = tmp_path / "bench"
    argv = [
        "--data", "sample:us_1min", "ppo.num_envs=64", "--seeds", "2", "run.num_seeds=1",
        "--wide", "--out", str(out), "ppo.total_timesteps=2048",
    ]  # fmt: skip
    assert benchmark.main(argv) == 2
    ((plan, root),) = plans
    assert plan.overrides == ("ppo.num_envs=64", "run.num_seeds=1", "ppo.total_timesteps=2048")
    assert plan.seeds == (0, 1) and root == out
    assert [d.path for d in plan.datasets] == ["sample:us_1min"]
    assert "stopped before any cell" in capsys.readouterr().err
    # --wide is a display option: allowed with --resume (which refuses the others)
    assert benchmark.main(["--resume", str(out), "--wide"]) == 2
    assert "not a benchmark run folder" in capsys.readouterr().err
    assert benchmark.main(["--resume", str(out), "--seeds", "2"]) == 2
    assert "drop the other options" in capsys.readouterr().err


def test_the_printed_table_fits_120_columns_and_wide_keeps_every_column(monkeypatch, capsys):
    """``python -m serl_jax.evaluate`` on the CN sample's test days (7 policies, 40
    orders on 10 days): every printed line fits 120 columns; the same rows with ``--wide``
    (what ``results.txt`` keeps) have every column, and are wider."""
    tables = []
    real = evaluate.format_table

    def format_table(rows, wide=False):
        tables.append(rows)
        return real(rows, wide=wide)

    monkeypatch.setattr(evaluate, "format_table", format_table)
    assert evaluate.main(["--data", "sample:cn_1min"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in printed) <= 120
    (rows,) = tables
    assert len(rows) == 7
    for name in ("TWAP", "VWAP", "oracle (not achievable)"):
        assert any(line.strip().startswith(name) for line in printed), name
    # AFI is 0 on every row (forced liquidation) and n is 40: named, not shown
    note = " ".join(" ".join(printed).split())
    assert "the same on every row: AFI 0.0000 [0.0000, 0.0000], n 40" in note
    wide = real(rows, wide=True).splitlines()
    assert wide[0].split() == [
        "market", "policy", "PA", "(bps)", "PA-std", "(bps)", "WR", "GLR", "AFI", "n",
        "PA-TWAP", "(bps)", "MDE", "won", "shortfall-TWAP", "(bps)",
    ]  # fmt: skip
    assert len(wide) == 2 + 7 + 2 and max(len(line) for line in wide) > 120
