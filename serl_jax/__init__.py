"""serl-jax: JAX-accelerated SE-RL for optimal order execution.

The JAX side of the framework: real-data loading, a vectorized limit order book,
execution environments, PPO + GAE, metrics and classic baselines. Importing this
package has no side effects (no ``jax.config`` changes, no downloads).
"""

__version__ = "0.1.0"
