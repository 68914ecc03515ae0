"""serl-jax: JAX-accelerated SE-RL for optimal order execution.

The JAX side of the framework: real-data loading, a vectorized limit order book,
execution environments, PPO + GAE, metrics and classic baselines. Importing this
package has one side effect: it registers the Gymnasium ids ``serl_jax/Execution-v0``
and ``serl_jax/DynamicExecution-v0`` (:mod:`serl_jax.gym`) by name, so that no
environment module is imported until ``gymnasium.make``. No ``jax.config`` changes, no
downloads.
"""

import gymnasium

__version__ = "0.1.0"

for _id, _market in (("Execution-v0", "static"), ("DynamicExecution-v0", "dynamic")):
    gymnasium.register(
        id=f"serl_jax/{_id}",
        entry_point="serl_jax.gym:gym_env",
        vector_entry_point="serl_jax.gym:vector_env",
        kwargs={"market": _market},
    )
del _id, _market
