"""The Dual-Level Enhancement Kit (DEK) that improves the designer from its scores.

High level (:mod:`llm.dek.high_level`): an instruction buffer of (instruction, code,
score) entries (score: the run's ``loop.score``, validation shortfall or PA), replay of
the best past pairs as in-context examples, and macro-micro refinement of the
instructions by the model itself.

Low level (:mod:`llm.dek.low_level`): LoRA fine-tuning of a local model by policy
gradient on the candidates' scores. It needs torch, transformers and peft, so it is not
imported here (``import llm.dek`` stays torch-free); import it explicitly::

    from llm.dek.low_level import LoRAConfig, LowLevelDEK

(``llm.dek.LowLevelDEK`` and the other names of ``llm.dek.low_level.__all__`` also resolve,
importing the module on first access.)
"""

from llm.dek.high_level import BufferEntry, InstructionBuffer

__all__ = ["BufferEntry", "InstructionBuffer"]

_LOW_LEVEL = frozenset(
    {
        "LoRAConfig",
        "LowLevelDEK",
        "UpdateStats",
        "baseline_and_advantages",
        "default_target_modules",
    }
)


def __getattr__(name: str):
    """Lazy access to the low level's names (PEP 562): imports torch on first use."""
    if name in _LOW_LEVEL:
        from llm.dek import low_level

        return getattr(low_level, name)
    raise AttributeError(f"module 'llm.dek' has no attribute {name!r}")
