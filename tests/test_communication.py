"""The communication slot (LLM4Communication): the library's modules pass validation and
give messages of their declared length; broken modules are rejected at the expected
stage with the reason named."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from llm.designs import library
from llm.validate import load_validated, validate
from serl_jax.components.communication import MAX_MESSAGE_SIZE, message_size

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
    assert sizes == {"linear_message": 4, "mlp_message": 8, "inventory_broadcast": 6}


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
