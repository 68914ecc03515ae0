"""The communication slot (LLM4Communication): the library's modules pass validation and
give messages of their declared length; broken modules are rejected at the expected
stage with the reason named."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import flax.linen as nn
import jax
import numpy as np
import pytest

from llm.designs import library
from llm.validate import load_validated, validate
from serl_jax.components.communication import (
    MAX_MESSAGE_SIZE,
    message_size,
    message_statistics,
)

PROGRAMS = {d.name: d.code for d in library("communication")}
BASE = PROGRAMS["linear_message"]
BODY = "return nn.tanh(nn.Dense(self.message_size)(obs))"
BROKEN = {
    "too long": (BASE.replace("message_size: int = 4", "message_size: int = 17"), "runtime",
                 f"1 <= M <= {MAX_MESSAGE_SIZE}, got float32[17]"),
    "a scalar": (BASE.replace(BODY, BODY + ".sum(-1)"), "runtime", "must be a vector [M]"),
    "nan": (BASE.replace(BODY, "return nn.Dense(self.message_size)(obs) * jnp.nan")
            .replace("import flax.linen as nn", "import flax.linen as nn\nimport jax.numpy as jnp"),
            "runtime", "messages are not finite"),
    "no class": (BASE.replace("class Communication", "class Talk"), "static",
                 "no top-level 'class Communication(nn.Module)'"),
}  # fmt: skip


def test_library_modules_declare_their_message_length():
    sizes = {name: message_size(load_validated(code, "communication"), 54) for name, code in
             PROGRAMS.items()}  # fmt: skip
    # inventory_broadcast: the 6 private features and a learned summary of 2 numbers
    assert sizes == {"linear_message": 4, "mlp_message": 8, "inventory_broadcast": 8}


@pytest.mark.slow
def test_library_modules_pass_and_broken_ones_are_rejected():
    assert all(code != BASE for code, _, _ in BROKEN.values())
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {
            name: pool.submit(validate, code, "communication") for name, code in PROGRAMS.items()
        }
        broken = {
            name: pool.submit(validate, c, "communication") for name, (c, _, _) in BROKEN.items()
        }
        verdicts = {name: job.result() for name, job in jobs.items()}
        rejected = {name: job.result() for name, job in broken.items()}
    for name, verdict in verdicts.items():
        assert verdict.ok, (name, verdict.reason)
    for name, (_, stage, reason) in BROKEN.items():
        verdict = rejected[name]
        assert not verdict.ok and verdict.stage == stage and reason in verdict.reason, verdict


class _Echo(nn.Module):
    """Sends its observation as the message (no parameters)."""

    @nn.compact
    def __call__(self, obs):
        return obs


def test_message_statistics_by_hand():
    """One day, two agents, three minutes, 2-number messages (the observation itself);
    agent 1 is inactive in the last minute (its [100, 100] must not count).

    Active messages: agent 0 (1, 0), (3, 0), (5, 0); agent 1 (2, 1), (2, 1). Means 13/5
    and 2/5; variances 9.2/5 and 1.2/5. Over an agent's own minutes: agent 0's first
    number has the population std sqrt(8/3), the other three series are constant, so the
    mean is sqrt(8/3)/4. Across agents: minutes 0 and 1 have two active agents, each
    number differing by 1 (std 0.5); minute 2 has one and does not count."""
    obs = np.array([[[[1, 0], [3, 0], [5, 0]], [[2, 1], [2, 1], [100, 100]]]], np.float32)
    active = np.array([[[True, True, True], [True, True, False]]])
    module = _Echo()
    params = module.init(jax.random.PRNGKey(0), obs)
    stats = message_statistics(module, params, obs, active)
    assert stats["size"] == 2
    np.testing.assert_allclose(stats["mean"], [13 / 5, 2 / 5], rtol=1e-6)
    np.testing.assert_allclose(stats["std"], np.sqrt([9.2 / 5, 1.2 / 5]), rtol=1e-6)
    assert stats["std_over_time"] == pytest.approx(np.sqrt(8 / 3) / 4, rel=1e-6)
    assert stats["std_across_agents"] == pytest.approx(0.5, rel=1e-6)
    silent = message_statistics(module, params, obs, np.zeros_like(active))
    assert silent == {"size": 2, "mean": None, "std": None, "std_over_time": None,
                      "std_across_agents": None}  # fmt: skip
    with pytest.raises(ValueError, match="must share"):
        message_statistics(module, params, obs, active[:, :1])
