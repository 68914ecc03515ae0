"""The SE-RL outer loop: designer -> code -> validation -> training -> metrics -> designer.

- :mod:`serl_jax.loop.outer`: :class:`SERLLoop`, Algorithm 1 of the seeds.
- :mod:`serl_jax.loop.search`: :class:`SERLSearch`, the loop as a search until a budget is
  spent: islands of scored programs (:mod:`serl_jax.loop.islands`), best-shot prompts and
  an evaluation cascade (:mod:`serl_jax.loop.cascade`).
- :mod:`serl_jax.loop.novelty`: copies, functional duplicates and distinct programs.
- :mod:`serl_jax.loop.evaluation`: training and scoring a candidate program, alone or with
  others in one compiled program.
- :mod:`serl_jax.loop.agents_evaluation`: the same for a multi-agent program
  (``marl.agents > 1``: the profiling and communication slots).
- :mod:`serl_jax.loop.dispatch`: runs programs through those two, batched, in worker
  processes or Ray actors with a wall-clock budget and a persistent compilation cache.
- :mod:`serl_jax.loop.workers`: worker processes that stop a task at its wall-clock budget.
- :mod:`serl_jax.loop.ray_pool`: the same on a Ray cluster (``loop.executor: ray``).
- :mod:`serl_jax.loop.store`: the SQLite run store that makes runs resumable.
- :mod:`serl_jax.loop.convergence`: the EMA stopping rule.
- :mod:`serl_jax.loop.report`: the final report (top candidates, test-day comparison).
"""

from serl_jax.loop.agents_evaluation import evaluate_agents_program
from serl_jax.loop.convergence import EmaConvergence
from serl_jax.loop.dispatch import ProgramEvaluator
from serl_jax.loop.evaluation import ProgramResult, evaluate_batch, evaluate_program
from serl_jax.loop.outer import LoopOutcome, SERLLoop, candidate_feedback
from serl_jax.loop.search import SERLSearch
from serl_jax.loop.store import Candidate, IterationSummary, RunStore, StoreError

__all__ = [
    "Candidate",
    "EmaConvergence",
    "IterationSummary",
    "LoopOutcome",
    "ProgramEvaluator",
    "ProgramResult",
    "RunStore",
    "SERLLoop",
    "SERLSearch",
    "StoreError",
    "candidate_feedback",
    "evaluate_agents_program",
    "evaluate_batch",
    "evaluate_program",
]
