"""LLM backends behind one interface: ``generate(prompts, n, temperature, max_new_tokens)``.

Build one from a spec with :func:`make_backend` (``scripted:<file.json>``,
``openai:<base_url>``, ``hf:<path or name>`` for a local transformers model, see
:class:`llm.backends.hf.HFBackend`; ``offline`` is reserved for a later version).
Importing this package imports neither ``openai`` nor torch; each backend module imports
its own client when it is used.
"""

from llm.backends.base import Backend, BackendError, make_backend
from llm.backends.scripted import ScriptedBackend

__all__ = ["Backend", "BackendError", "ScriptedBackend", "make_backend"]
