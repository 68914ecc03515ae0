"""An OpenAI-compatible chat-completions backend (vLLM, Ollama, llama.cpp server, OpenAI).

Uses the official ``openai`` client::

    backend = OpenAIBackend("http://localhost:8000/v1", model="Qwen/Qwen2.5-Coder-7B-Instruct")
    [[c0, c1]] = backend.generate(["Write a reward function ..."], n=2)

Configuration: the model name comes from ``model``, else ``SERL_LLM_MODEL``, else
``OPENAI_MODEL``, else the server's ``/models`` list (the first id; most local servers
serve one model). The key comes from ``api_key``, else ``OPENAI_API_KEY``, else
``"EMPTY"`` (what local servers expect). ``base_url`` is used as given: most local servers
want the ``/v1`` suffix (``http://localhost:8000/v1`` for vLLM,
``http://localhost:11434/v1`` for Ollama).

Behaviour:

- ``n > 1`` is requested from the server; when the server returns fewer choices (many
  local servers ignore ``n``), the rest is fetched with repeated requests, and later
  requests then ask for one completion each.
- Timeouts: ``timeout`` seconds per request (the client's own setting; connecting gets
  at most ``min(timeout, 5)`` seconds).
- Retries: connection errors, timeouts, HTTP 408/409/429 and 5xx are retried up to
  ``max_retries`` times, sleeping ``backoff * 2**attempt`` seconds (capped at
  ``max_backoff``) in between. The client's built-in retries are switched off so that
  this schedule is the only one (the client's own delays cannot be configured).
- Other HTTP errors (401, 404, 400, ...) and nonsense answers (not JSON, no choices,
  empty content) raise :class:`BackendError` at once, naming the URL.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import openai

from llm.backends.base import Backend, BackendError

__all__ = ["OpenAIBackend"]

_RETRY_STATUS = frozenset({408, 409, 429})


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _status_message(error: openai.APIStatusError) -> str:
    """The server's own error message (``{"error": {"message": ...}}``) on one line."""
    body = getattr(error, "body", None)  # the client unwraps {"error": ...} in some versions
    if isinstance(body, str) and body.strip():
        return _one_line(body)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return _one_line(inner["message"])
        if isinstance(inner, str):
            return _one_line(inner)
    return _one_line(re.sub(r"^Error code: \d+ - ", "", str(error.message)))


class OpenAIBackend(Backend):
    """Chat completions from an OpenAI-compatible server.

    Args:
        base_url: the server's API root, e.g. ``http://localhost:8000/v1``.
        model: model name; ``None``: ``SERL_LLM_MODEL``, ``OPENAI_MODEL``, else the first
            model the server lists.
        api_key: API key; ``None``: ``OPENAI_API_KEY``, else ``"EMPTY"``.
        timeout: seconds per request (> 0).
        max_retries: retries after the first attempt for transient failures (>= 0).
        backoff: first retry delay in seconds (>= 0); doubles each retry.
        max_backoff: the longest delay between retries, in seconds.
        system_prompt: an optional system message sent before each prompt.

    Raises:
        BackendError: ``base_url`` is not an http(s) URL, or a setting is out of range.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        system_prompt: str | None = None,
    ) -> None:
        base_url = str(base_url).strip().rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise BackendError(
                f"openai backend: base URL {base_url!r} must start with http:// or https:// "
                "(e.g. http://localhost:8000/v1)"
            )
        if not timeout > 0 or max_retries < 0 or backoff < 0 or max_backoff < 0:
            raise BackendError(
                "openai backend: timeout must be > 0 and max_retries, backoff, max_backoff >= 0"
            )
        self.base_url = base_url
        self.model = model or os.environ.get("SERL_LLM_MODEL") or os.environ.get("OPENAI_MODEL")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.system_prompt = system_prompt
        #: False once the server has answered a request for n > 1 with fewer choices.
        self.server_honours_n = True
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=openai.Timeout(self.timeout, connect=min(self.timeout, 5.0)),
            max_retries=0,
        )

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._client.close()

    def _fail(self, what: str) -> BackendError:
        return BackendError(f"LLM server at {self.base_url} {what}")

    def _call(self, request: Any, what: str) -> Any:
        """Runs ``request()`` with the retry schedule; returns its result."""
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return request()
            except openai.APITimeoutError:
                problem = f"timed out after {self.timeout:g} s"
            except openai.APIConnectionError as e:
                cause = e.__cause__ or e
                problem = f"is unreachable ({_one_line(cause, 120)})"
            except openai.APIStatusError as e:
                code = e.status_code
                problem = f"answered HTTP {code} to {what}: {_status_message(e)}"
                if code not in _RETRY_STATUS and code < 500:
                    hint = " (does the base URL need a /v1 suffix?)" if code == 404 else ""
                    raise self._fail(problem + hint) from None
            except openai.APIResponseValidationError as e:
                raise self._fail(f"answered nonsense to {what}: {_one_line(e.message)}") from None
            except ValueError as e:  # the client's JSON decoding of a non-JSON body
                problem = f"answered nonsense to {what} (not JSON: {_one_line(e, 80)})"
                raise self._fail(problem) from None
            if attempt + 1 < attempts:
                time.sleep(min(self.backoff * 2**attempt, self.max_backoff))
        raise self._fail(f"{problem} (gave up after {attempts} attempts)")

    def _resolve_model(self) -> str:
        if self.model:
            return self.model
        page = self._call(self._client.models.list, "GET /models")
        ids = [getattr(m, "id", None) for m in (getattr(page, "data", None) or [])]
        ids = [i for i in ids if isinstance(i, str) and i]
        if not ids:
            raise self._fail("lists no models; pass a model name (--model) or set SERL_LLM_MODEL")
        self.model = ids[0]
        return self.model

    def _messages(self, prompt: str) -> list[dict[str, str]]:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def _choices(self, response: Any) -> list[str]:
        """The completion texts of one chat-completions response, or a BackendError."""
        if isinstance(response, str | bytes):  # a non-JSON content type
            raise self._fail(f"answered nonsense (not JSON: {_one_line(response, 80)!r})")
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise self._fail("answered nonsense (no choices in the chat completion)")
        texts = []
        for choice in choices:
            message = getattr(choice, "message", None)
            content = getattr(message, "content", None)
            if not isinstance(content, str) or not content.strip():
                raise self._fail("answered nonsense (a choice with empty content)")
            texts.append(content)
        return texts

    def _sample(self, prompt: str, n: int, temperature: float, max_tokens: int) -> list[str]:
        model = self._resolve_model()
        messages = self._messages(prompt)
        texts: list[str] = []
        while len(texts) < n:
            want = n - len(texts) if self.server_honours_n else 1
            response = self._call(
                lambda want=want: self._client.chat.completions.create(
                    model=model,
                    messages=messages,
                    n=want,
                    temperature=temperature,
                    max_tokens=max_tokens,
                ),
                "POST /chat/completions",
            )
            got = self._choices(response)
            if want > 1 and len(got) < want:
                self.server_honours_n = False
            texts.extend(got[:want])
        return texts

    def _generate(
        self, prompts: list[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        return [self._sample(p, n, temperature, max_new_tokens) for p in prompts]
