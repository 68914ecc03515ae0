"""The LLM side of SE-RL (PyTorch / transformers / PEFT).

Filled by the SE-RL outer-loop issue; torch, transformers and peft are imported only
inside this package and only when a model backend is used (``pip install -e .[llm]``).
"""
