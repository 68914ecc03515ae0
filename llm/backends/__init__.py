"""LLM backends behind one interface: ``generate(prompts, n, temperature, max_new_tokens)``.

Build one from a spec with :func:`make_backend`: ``offline`` (the default designer, a
program-library sampler and mutator that is not a language model,
:class:`llm.backends.offline.OfflineDesigner`), ``hf:<path or name>`` (a local
transformers model, :class:`llm.backends.hf.HFBackend`), ``openai:<base_url>`` (any
OpenAI-compatible server) or ``scripted:<file.json>`` (canned completions for tests).
Importing this package imports neither ``openai`` nor torch; each backend module imports
its own client when it is used.
"""

from llm.backends.base import Backend, BackendError
from llm.backends.factory import make_backend
from llm.backends.scripted import ScriptedBackend

__all__ = ["Backend", "BackendError", "ScriptedBackend", "make_backend"]
