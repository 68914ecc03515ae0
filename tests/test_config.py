"""Config presets, overrides and their one-line errors."""

from __future__ import annotations

from pathlib import Path

import flax.linen as nn
import pytest

from serl_jax.config import ConfigError, load_config, saved_network_config, saved_run_config
from serl_jax.rl.networks import ActorCritic, declared_prior_anchor

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("preset", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_preset_loads(preset):
    cfg = load_config(CONFIGS / preset)
    assert cfg.ppo.num_updates >= 1
    assert cfg.to_dict()["env"]["benchmark"] in ("vwap", "twap")


def test_overrides_are_typed_and_applied():
    cfg = load_config(None, ["ppo.lr=1e-3", "env.side=-1", "network.hidden_sizes=[8, 8]"])
    assert cfg.ppo.lr == 1e-3 and cfg.env["side"] == -1.0
    assert cfg.network.hidden_sizes == (8, 8)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ppo.learning_rate=1", "ppo.learning_rate: unknown key"),
        ("ppo.num_envs=abc", "ppo.num_envs: expected an integer"),
        ("env.benchmark=close", "env.benchmark: expected 'vwap' or 'twap'"),
        ("env.side=0", "env.side: expected 1 (sell) or -1 (buy)"),
        ("env.child_quantity=pov", "env.child_quantity: expected one of"),
        ("market.child_order=iceberg", "market.child_order: expected market, passive or sliced"),
        ("market.child_slices=-1", "market.child_slices: expected an int >= 0, got -1"),
        ("bogus.key=1", "bogus: unknown section"),
        ("ppo.num_minibatches=7", "ppo.num_minibatches=7 must divide"),
        ("novalue", "expected section.key=value"),
        ("marl.algorithm=qmix", "marl.algorithm: expected one of"),
        ("marl.scenario=cartel", "marl.scenario: expected one of"),
        ("marl.agents=3 market.mode=static", "not static; set market.mode=dynamic or hybrid"),
        ("marl.critic_hidden_sizes=[]", "marl.critic_hidden_sizes must be positive"),
        ("ppo.distill_coef=-1", "ppo.distill_coef must be >= 0"),
        ("ppo.distill_teacher=expert", "ppo.distill_teacher: expected one of"),
        ("env.step_minutes=0", "env.step_minutes: must be >= 1"),
        ("env.step_minutes=5", "decision intervals run in the static market"),
        ("ppo.distill_coef=1", "policy distillation trains one agent with --llm none"),
        ("ppo.distill_coef=1 loop.llm=none", "in the static market on real days"),
    ],
)
def test_bad_values_give_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, override.split())  # space-separated overrides
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_default_preset_is_the_built_in_default():
    """``python -m serl_jax.train`` without --config must run the documented preset."""
    assert load_config(CONFIGS / "default.yaml") == load_config(None)


def test_loop_score_is_checked():
    assert load_config(None).loop.score == "shortfall"
    assert load_config(None, ["loop.score=pa"]).loop.score == "pa"
    with pytest.raises(
        ConfigError, match=r"loop.score: expected one of \['shortfall', 'pa', 'mean_variance'\]"
    ):
        load_config(None, ["loop.score=cost"])
    with pytest.raises(ConfigError, match=r"loop.score=mean_variance: .* \(marl.agents=1\)"):
        load_config(None, ["loop.score=mean_variance", "marl.agents=2"])
    assert load_config(None).loop.env == "static"
    with pytest.raises(ConfigError, match=r"loop.env: expected one of \['static', 'dynamic', "):
        load_config(None, ["loop.env=lob"])
    assert load_config(None).loop.prompt_style == "full"
    with pytest.raises(ConfigError, match=r"prompt_style: expected one of \['full', 'compact'\]"):
        load_config(None, ["loop.prompt_style=short"])


def test_runs_recorded_before_loop_score_resume_ranked_by_pa():
    legacy = load_config(None).to_dict()
    legacy["loop"].pop("score")
    legacy["loop"]["failure_pa"] = legacy["loop"].pop("failure_score") - 1.0
    cfg = saved_run_config(legacy)
    assert (cfg.loop.score, cfg.loop.failure_score) == ("pa", -101.0)
    assert saved_run_config(load_config(None).to_dict()) == load_config(None)


class _Anchored(nn.Module):
    prior_anchor_steps: float = 12.0

    def __call__(self, obs):
        return obs


@pytest.mark.parametrize("bad", [-1.0, 1001.0, float("nan"), True, "5"])
def test_a_network_declares_its_prior_anchor(bad):
    network = load_config(None).network
    assert network.for_network(ActorCritic()) == network  # declares none: the config's
    assert network.for_network(_Anchored()).prior_anchor_steps == 12.0
    assert declared_prior_anchor(_Anchored(prior_anchor_steps=0)) == 0.0
    with pytest.raises(ValueError, match=r"^network field prior_anchor_steps: expected"):
        network.for_network(_Anchored(prior_anchor_steps=bad))


def test_saved_network_config():
    assert saved_network_config({"network": {}}).prior_anchor_steps == 0.0  # old checkpoint
    saved = load_config(None, ["network.prior_anchor_steps=12"]).to_dict()
    assert saved_network_config(saved).prior_anchor_steps == 12.0


def test_the_marl_section_sets_the_trainer():
    cfg = load_config(None, ["marl.agents=3", "market.mode=dynamic", "marl.scenario=team"])
    trainer = cfg.marl.trainer_config()
    assert cfg.marl.agents == 3 and trainer.algorithm == "ippo" and trainer.team_reward
    assert not load_config(None, []).marl.trainer_config().team_reward


def test_several_agents_design_the_multi_agent_modules_by_default():
    """With marl.agents > 1 and no loop.modules the loop also designs profiles and
    messages; modules given explicitly (or recorded in a run's config) are kept."""
    assert load_config(None, []).loop.modules == ("reward", "network")
    several = load_config(None, ["marl.agents=2", "market.mode=dynamic"])
    assert several.loop.modules == ("reward", "network", "profiling", "communication")
    chosen = load_config(None, ["marl.agents=2", "market.mode=dynamic", "loop.modules=[reward]"])
    assert chosen.loop.modules == ("reward",)
    assert saved_run_config(several.to_dict()).loop.modules == several.loop.modules
