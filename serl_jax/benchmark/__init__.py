"""The seed's results table at scale: ``python -m serl_jax.benchmark``.

- :mod:`serl_jax.benchmark.suites`: the datasets (the paper suite and its splits) and
  the rows (baselines, PPO variants, SE-RL loops, ablations).
- :mod:`serl_jax.benchmark.rows`: how a row's cell is produced (training, the loop,
  rollouts on every split).
- :mod:`serl_jax.benchmark.cells`: cells stored when done, so a killed run resumes.
- :mod:`serl_jax.benchmark.run`: the run folder and the order cells run in.
- :mod:`serl_jax.benchmark.tables`: cells -> paired statistics clustered by day ->
  ``results.md``, ``results.json``, ``results.png``.
"""

from serl_jax.benchmark.run import Plan, run_plan
from serl_jax.benchmark.suites import Dataset, Row

__all__ = ["Dataset", "Plan", "Row", "run_plan"]
