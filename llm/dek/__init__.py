"""The Dual-Level Enhancement Kit (DEK) that improves the designer from its scores.

High level (:mod:`llm.dek.high_level`): an instruction buffer of (instruction, code, PA)
entries, replay of the best past pairs as in-context examples, and macro-micro
refinement of the instructions by the model itself. Low level (LoRA fine-tuning of a
local model by policy gradient) comes with its own module.
"""

from llm.dek.high_level import BufferEntry, InstructionBuffer

__all__ = ["BufferEntry", "InstructionBuffer"]
