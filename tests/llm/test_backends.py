"""LLM backends (llm/backends): the spec grammar, the scripted backend, and the openai
backend against a small OpenAI-compatible HTTP server on 127.0.0.1 run by the test."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm.backends import Backend, BackendError, ScriptedBackend, make_backend
from llm.backends.openai_backend import OpenAIBackend

JSON = "application/json"


# --------------------------------------------------------------------------- fake server


def chat(*contents: str) -> tuple[int, dict, str]:
    """A 200 chat-completions reply with one choice per content."""
    choices = [
        {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
        for i, c in enumerate(contents)
    ]
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices}
    return 200, body, JSON


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 answering from a list of scripted replies.

    Each reply is ``(status, body, content_type)`` or ``(status, body, content_type, delay_s)``;
    when the list is empty it answers HTTP 500. It records every request (method, path,
    lower-cased headers, JSON body) and stops by itself after ``lifetime`` seconds or on
    :meth:`stop`.
    """

    def __init__(self, replies, lifetime: float = 30.0):
        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                outer.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(raw) if raw else None,
                    }
                )
                empty = (500, "no reply left", "text/plain")
                reply = outer.replies.pop(0) if outer.replies else empty
                status, body, ctype, *delay = reply
                if delay:
                    time.sleep(delay[0])
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

            do_GET = do_POST = _reply

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.timeout = 0.05
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._stop = threading.Event()
        self._deadline = time.monotonic() + lifetime
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            self.server.handle_request()
        self.server.server_close()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    @property
    def bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests]


@pytest.fixture
def serve():
    """``serve(*replies) -> FakeServer``; every server is stopped after the test."""
    servers = []

    def start(*replies):
        servers.append(FakeServer(replies))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("SERL_LLM_MODEL", "OPENAI_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def fast(url: str, **kw) -> OpenAIBackend:
    """A backend with short timeouts and delays, so failures cost milliseconds."""
    kw = {"model": "test-model", "timeout": 2.0, "max_retries": 0, "backoff": 0.01, **kw}
    return OpenAIBackend(url, **kw)


def free_closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- make_backend


def test_make_backend_scripted_and_openai(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(["a", "b"]))
    scripted = make_backend(f"scripted:{path}")
    assert isinstance(scripted, ScriptedBackend) and isinstance(scripted, Backend)
    assert scripted.generate(["p"], n=2) == [["a", "b"]]
    openai_backend = make_backend("openai:http://127.0.0.1:1/v1/", model="m", timeout=3)
    assert isinstance(openai_backend, OpenAIBackend)
    assert (openai_backend.base_url, openai_backend.model) == ("http://127.0.0.1:1/v1", "m")
    assert openai_backend.timeout == 3.0


@pytest.mark.parametrize(
    "spec, match",
    [
        ("offline:x", "'offline' takes no value"),
        ("hf:", "needs a value after 'hf:'"),
        ("gpt4", "unknown LLM backend spec 'gpt4'; expected scripted:"),
        ("", "empty LLM backend spec"),
        ("openai:", "needs a value after 'openai:'"),
        ("scripted:  ", "needs a value after 'scripted:'"),
        ("openai:localhost:8000/v1", "must start with http:// or https://"),
    ],
)
def test_make_backend_refuses_with_one_line(spec, match):
    with pytest.raises(BackendError, match=match) as info:
        make_backend(spec)
    assert "\n" not in str(info.value)


def test_make_backend_unknown_option(tmp_path):
    with pytest.raises(BackendError, match="bad options for the openai backend"):
        make_backend("openai:http://127.0.0.1:1/v1", temperature=0.3)
    (tmp_path / "c.json").write_text("[]")
    with pytest.raises(BackendError, match="bad options for the scripted backend"):
        make_backend(f"scripted:{tmp_path / 'c.json'}", model="x")


# --------------------------------------------------------------------------- scripted


def test_scripted_in_order_records_prompts_and_raises_when_exhausted():
    backend = ScriptedBackend(["c0", "c1", "c2", "c3", "c4"])
    assert backend.generate(["p0", "p1"], n=2, temperature=0.1, max_new_tokens=7) == [
        ["c0", "c1"],
        ["c2", "c3"],
    ]
    assert backend.remaining == 1
    assert backend.generate(["error: NaN reward"]) == [["c4"]]
    assert backend.prompts == ["p0", "p1", "error: NaN reward"]
    assert backend.calls[0] == {
        "prompts": ["p0", "p1"],
        "n": 2,
        "temperature": 0.1,
        "max_new_tokens": 7,
    }
    with pytest.raises(BackendError, match="scripted backend exhausted after 5 completions"):
        backend.generate(["p"])


def test_scripted_cycle():
    backend = ScriptedBackend(["a", "b"], cycle=True)
    assert backend.generate(["p"], n=5) == [["a", "b", "a", "b", "a"]]


def test_scripted_keyed_queues():
    backend = ScriptedBackend({"LLM4Reward": ["r0", "r1"], "LLM4Agent": "n0", "": ["other"]})
    out = backend.generate(["macro... LLM4Agent ...", "LLM4Reward", "LLM4Reward", "plain"])
    assert out == [["n0"], ["r0"], ["r1"], ["other"]]
    with pytest.raises(BackendError, match="exhausted for key 'LLM4Agent' after 1 completions"):
        backend.generate(["LLM4Agent"])
    with pytest.raises(BackendError, match="no scripted key occurs in prompt"):
        ScriptedBackend({"a": ["x"]}).generate(["b"])


def test_scripted_from_json(tmp_path):
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"completions": {"R": ["r"]}, "cycle": True}))
    backend = make_backend(f"scripted:{obj}")
    assert backend.generate(["R"], n=3) == [["r", "r", "r"]]
    assert make_backend(f"scripted:{obj}", cycle=False).cycle is False
    bad = tmp_path / "bad.json"
    for text, match in [
        ("{not json", "is not valid JSON"),
        ('{"items": []}', 'must hold a list of strings or an object with keys "completions"'),
        ("[1, 2]", "must be a string or a list of strings"),
        ("[]", "has no completions"),
        ('"abc"', "must be a list or object"),
    ]:
        bad.write_text(text)
        with pytest.raises(BackendError, match=match):
            ScriptedBackend.from_json(bad)
    with pytest.raises(BackendError, match="cannot read .*missing.json"):
        make_backend(f"scripted:{tmp_path / 'missing.json'}")


def test_generate_checks_arguments():
    backend = ScriptedBackend(["a"], cycle=True)
    with pytest.raises(TypeError, match="not a single string"):
        backend.generate("a prompt")
    with pytest.raises(TypeError, match="prompts must be strings"):
        backend.generate([1])
    for kwargs in ({"n": 0}, {"n": 1.5}, {"temperature": -1.0}, {"max_new_tokens": 0}):
        with pytest.raises(ValueError):
            backend.generate(["p"], **kwargs)
    assert backend.generate([]) == []
    assert backend.calls == []


# --------------------------------------------------------------------------- openai


def test_openai_normal_answer_and_exact_request(serve):
    server = serve(chat("```python\nx = 1\n```"), chat("second"))
    backend = fast(server.url, system_prompt="You write JAX code.")
    out = backend.generate(["Write a reward.", "Again."], n=1, temperature=0.25, max_new_tokens=64)
    assert out == [["```python\nx = 1\n```"], ["second"]]
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 2
    assert server.bodies[0] == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "You write JAX code."},
            {"role": "user", "content": "Write a reward."},
        ],
        "n": 1,
        "temperature": 0.25,
        "max_tokens": 64,
    }
    assert server.bodies[1]["messages"] == [
        {"role": "system", "content": "You write JAX code."},
        {"role": "user", "content": "Again."},
    ]
    assert server.requests[0]["headers"]["authorization"] == "Bearer EMPTY"


def test_openai_model_and_key_from_environment(serve, monkeypatch):
    monkeypatch.setenv("OPENAI_MODEL", "from-openai-model")
    monkeypatch.setenv("SERL_LLM_MODEL", "from-serl")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = serve(chat("a"))
    backend = OpenAIBackend(server.url, timeout=2, max_retries=0)
    assert backend.generate(["p"]) == [["a"]]
    assert server.bodies[0]["model"] == "from-serl"
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-test"


def test_openai_model_from_server_list(serve):
    models = {"object": "list", "data": [{"id": "served-model", "object": "model"}]}
    server = serve((200, models, JSON), chat("a"), chat("b"))
    backend = fast(server.url, model=None)
    assert backend.generate(["p", "q"]) == [["a"], ["b"]]
    assert [r["path"] for r in server.requests] == ["/v1/models"] + ["/v1/chat/completions"] * 2
    assert [b["model"] for b in server.bodies[1:]] == ["served-model"] * 2
    empty = serve((200, {"object": "list", "data": []}, JSON))
    with pytest.raises(BackendError, match="lists no models; pass a model name"):
        fast(empty.url, model=None).generate(["p"])


def test_openai_n_requested_from_a_server_that_honours_it(serve):
    server = serve(chat("a", "b", "c"))
    assert fast(server.url).generate(["p"], n=3) == [["a", "b", "c"]]
    assert [b["n"] for b in server.bodies] == [3]


def test_openai_n_emulated_when_server_returns_one_choice(serve):
    server = serve(*[chat(c) for c in "abcdef"])
    backend = fast(server.url)
    out = backend.generate(["p", "q"], n=3, temperature=0.5, max_new_tokens=32)
    assert out == [["a", "b", "c"], ["d", "e", "f"]]
    assert backend.server_honours_n is False
    # n=3 first; after the short answer, one completion per request
    assert [b["n"] for b in server.bodies] == [3, 1, 1, 1, 1, 1]
    user = [b["messages"][-1]["content"] for b in server.bodies]
    assert user == ["p"] * 3 + ["q"] * 3
    assert all(
        b["temperature"] == 0.5 and b["max_tokens"] == 32 and b["model"] == "test-model"
        for b in server.bodies
    )


def test_openai_garbage_answer_raises_at_once(serve):
    for reply, match in [
        ((200, "<html>It works!</html>", "text/html"), "answered nonsense \\(not JSON"),
        ((200, "not json at all", JSON), "answered nonsense to POST /chat/completions \\(not JSON"),
        ((200, {"hello": "world"}, JSON), "no choices in the chat completion"),
        ((200, {"choices": []}, JSON), "no choices in the chat completion"),
        (chat(""), "a choice with empty content"),
    ]:
        server = serve(reply, chat("never reached"))
        backend = fast(server.url, max_retries=3)
        with pytest.raises(BackendError, match=match) as info:
            backend.generate(["p"])
        message = str(info.value)
        assert message.startswith(f"LLM server at {server.url} ") and "\n" not in message
        assert len(server.requests) == 1  # nonsense is not retried


def test_openai_closed_port_fails_quickly():
    url = f"http://127.0.0.1:{free_closed_port()}/v1"
    backend = fast(url, max_retries=2, backoff=0.01)
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        backend.generate(["p"])
    assert time.monotonic() - start < 5.0
    message = str(info.value)
    assert message.startswith(f"LLM server at {url} is unreachable")
    assert message.endswith("(gave up after 3 attempts)") and "\n" not in message


def test_openai_timeout(serve):
    server = serve(chat("late", "x") + (1.5,))
    backend = fast(server.url, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"timed out after 0.3 s \(gave up after 1 attempts\)"):
        backend.generate(["p"])
    assert time.monotonic() - start < 1.4


def test_openai_retries_with_backoff_after_a_500(serve):
    server = serve((500, {"error": {"message": "overloaded"}}, JSON), chat("ok"))
    backend = fast(server.url, max_retries=2, backoff=0.2)
    start = time.monotonic()
    assert backend.generate(["p"]) == [["ok"]]
    assert time.monotonic() - start >= 0.2
    assert len(server.requests) == 2 and server.bodies[0] == server.bodies[1]


def test_openai_gives_up_after_max_retries(serve):
    server = serve(*[(503, {"error": {"message": "busy"}}, JSON)] * 3, chat("too late"))
    with pytest.raises(BackendError, match=r"HTTP 503 .*busy \(gave up after 3 attempts\)"):
        fast(server.url, max_retries=2).generate(["p"])
    assert len(server.requests) == 3


def test_openai_client_errors_are_not_retried(serve):
    server = serve((404, {"error": {"message": "not found"}}, JSON), chat("x"))
    with pytest.raises(BackendError, match="HTTP 404 .*not found \\(does the base URL need a /v1"):
        fast(server.url, max_retries=3).generate(["p"])
    assert len(server.requests) == 1
    ollama_style = serve((404, {"error": "model 'qwen' not found"}, JSON))
    with pytest.raises(BackendError, match="HTTP 404 to POST /chat/completions: model 'qwen' not"):
        fast(ollama_style.url).generate(["p"])
