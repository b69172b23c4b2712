"""A fake Ollama server: the scripted upstream for GraphGate's tests.

It speaks the Ollama wire contract of /work/shared/reference/ollama-api.md §1
(status codes, content types, NDJSON framing, field names and types), answers
with a scripted reply, records every request, and can be told to fail, hang or
break a stream. Use it in-process (``FakeOllama().transport()`` for an
``httpx.AsyncClient``) or as a real server on 127.0.0.1 (``with fake.serve() as url``).

Note that ``httpx.ASGITransport`` runs the app to the end before it returns the
response: in-process, streams arrive all at once and httpx timeouts are not
enforced. Tests about timing, timeouts or disconnects need ``serve()``.

Special model names (accepted by the inference endpoints, never listed in tags):
``fail-500``, ``busy-503``, ``hang``, ``slow-first``, ``disconnect``,
``midstream-error`` and ``garbled``; see ``_resolve_inference``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import numpy as np
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

try:  # tests/ as a package, or tests/ itself on sys.path
    from .fake_ollama_openai import OpenAIEndpoints
except ImportError:  # mypy reads tests/ as a package, where this fallback is never taken
    from fake_ollama_openai import OpenAIEndpoints  # type: ignore[import-not-found, no-redef]

DEFAULT_REPLY = ["Hello", " from", " the", " fake", " model."]
THINKING = ["Let me think", " about this."]
THINK_LEVELS = {"low", "medium", "high", "max"}
MODEL_ERROR = "an error was encountered while running the model: unexpected EOF"
SPECIAL_ERRORS = {
    "fail-500": (500, "llama runner process has terminated: exit status 2"),
    "busy-503": (503, "server busy, please try again.  maximum pending requests exceeded"),
}
SPECIAL_MODELS = {*SPECIAL_ERRORS, "hang", "slow-first", "disconnect", "midstream-error", "garbled"}
# what ``garbled`` sends after two good lines: a line cut short, then a proxy's HTML error page
GARBLED_LINES = (b'{"model":"garbled","message":{"role":"assistant","conte\n',
                 b"<html><body>502 Bad Gateway</body></html>\n")
_NO_SHAPE = object()
TAG_FIELDS = ("name", "model", "modified_at", "size", "digest", "details")
ZERO_DURATION = re.compile(r"^[+-]?0+(\.0*)?(ns|us|µs|ms|s|m|h)?$")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any  # parsed JSON or None
    at: float = 0.0   # time.monotonic() when its body was read
    client: str = ""  # "host:port" of the connection it came on


@dataclass
class StreamEvent:
    path: str
    model: str
    started: float  # time.monotonic()
    ended: float | None = None
    completed: bool = False  # False if cancelled, the client went away, or aborted
    sent: int = 0  # lines handed to the server so far (a test knows which lines left after a moment it saw)


class ThreadGate:
    """``hold_structured`` for a test whose fake serves in a thread (``serve()``): an anyio.Event set from
    the test's thread would not wake the server's event loop. The first ``pass_first`` structured answers
    go through; the rest wait until ``open()``. ``passed`` and ``held`` (answers waiting right now) let
    the test act at a known point of the work rather than after a guessed time."""

    def __init__(self, pass_first: int = 0) -> None:
        self.pass_first = pass_first
        self.passed = 0
        self.held = 0
        self._opened = threading.Event()
        self._lock = threading.Lock()

    async def wait(self) -> None:
        with self._lock:
            if self.passed < self.pass_first or self._opened.is_set():
                self.passed += 1
                return
            self.held += 1
        try:
            while not self._opened.is_set():
                await anyio.sleep(0.005)
        finally:
            with self._lock:
                self.held -= 1

    def open(self) -> None:
        self._opened.set()


class InjectedDisconnect(httpx.RemoteProtocolError):
    """Raised inside a response body to drop the connection abruptly.

    Under uvicorn the client sees the connection close (httpx.RemoteProtocolError);
    in-process httpx.ASGITransport re-raises this exception, which is one as well.
    """


class _HTTPError(Exception):
    """An error reply sent before the first byte: the real status and a JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _JSON(Response):
    media_type = "application/json; charset=utf-8"

    def render(self, content: Any) -> bytes:
        return _dumps(content)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _line(obj: Any) -> bytes:
    return _dumps(obj) + b"\n"


def now_rfc3339(delta: timedelta = timedelta()) -> str:
    """RFC 3339 UTC with the fraction always present (Python's isoformat drops it at .000000)."""
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def normalize(name: str) -> str:
    """'llama3.2' -> 'llama3.2:latest'; names that carry a tag are kept."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _special(name: str) -> str | None:
    base = name.removesuffix(":latest")
    return base if base in SPECIAL_MODELS else None


def _stable_int(text: str, bits: int = 32) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % (1 << bits)


def fake_embedding(text: str, dim: int) -> list[float]:
    """Deterministic bag-of-words embedding, L2-normalised.

    Each lower-cased word adds +-1 to one hashed dimension; a small constant
    component keeps the empty text away from the zero vector.
    """
    vec = np.full(dim, 0.1 / math.sqrt(dim))
    hashes = [_word_hash(word) for word in re.findall(r"\w+", text.lower())]
    if hashes:
        np.add.at(vec, [h % dim for h in hashes], [1.0 if (h >> 32) & 1 else -1.0 for h in hashes])
    return (vec / np.linalg.norm(vec)).tolist()


@functools.lru_cache(maxsize=200_000)
def _word_hash(word: str) -> int:
    return _stable_int(word, 64)


def overlap_score(query: str, document: str) -> float:
    """The fake re-ranker's relevance: the share of the query's distinct words the document holds."""
    words = set(re.findall(r"\w+", query.lower()))
    return len(words & set(re.findall(r"\w+", document.lower()))) / len(words) if words else 0.0


def _word_count(value: Any) -> int:
    return len(re.findall(r"\w+", value if isinstance(value, str) else json.dumps(value)))


def _think_on(value: Any) -> bool:
    return value is True or value in THINK_LEVELS


def _unloads(keep_alive: Any) -> bool:
    if isinstance(keep_alive, bool):
        return False
    if isinstance(keep_alive, (int, float)):
        return keep_alive == 0
    return isinstance(keep_alive, str) and bool(ZERO_DURATION.match(keep_alive))


def _tool_call(tools: list, index: int = 0) -> dict:
    function = tools[0].get("function", {}) if isinstance(tools[0], dict) else {}
    return {
        "id": f"call_{secrets.token_hex(4)}",
        "function": {"index": index, "name": function.get("name", "tool"), "arguments": {"city": "Paris"}},
    }


def _model_record(name: str, family: str, parameter_size: str, capabilities: list[str], *,
                  parameters: str, model_info: dict, size: int, template: str, quantization: str,
                  modified_at: str, license: str = "") -> dict:
    return {
        "name": name, "model": name, "modified_at": modified_at, "size": size,
        "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {"parent_model": "", "format": "gguf", "family": family, "families": [family],
                    "parameter_size": parameter_size, "quantization_level": quantization},
        "capabilities": capabilities, "parameters": parameters, "template": template,
        "model_info": model_info, "license": license, "system": "",
    }


def default_models() -> dict[str, dict]:
    llama = _model_record(
        "llama3.2:latest", "llama", "3.2B", ["completion", "tools"],
        parameters='num_ctx 8192\nstop "<|eot_id|>"', size=2019393189, quantization="Q4_K_M",
        model_info={"general.architecture": "llama", "llama.context_length": 131072,
                    "llama.embedding_length": 3072},
        template="<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>",
        modified_at="2025-10-26T17:21:21.196249Z", license="LLAMA 3.2 COMMUNITY LICENSE AGREEMENT")
    qwen = _model_record(
        "qwen3:latest", "qwen3", "8.2B", ["completion", "tools", "thinking"],
        parameters="temperature 0.6", size=5225388164, quantization="Q4_K_M",
        model_info={"general.architecture": "qwen3", "qwen3.context_length": 40960},
        template="{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}",
        modified_at="2025-10-20T09:02:11.52891Z", license="Apache License 2.0")
    nomic = _model_record(
        "nomic-embed-text:latest", "nomic-bert", "137M", ["embedding"],
        parameters="num_ctx 8192", size=274302450, quantization="F16",
        model_info={"general.architecture": "nomic-bert", "nomic-bert.context_length": 2048},
        template="{{ .Prompt }}", modified_at="2025-09-01T12:00:00.000001Z")
    return {m["name"]: m for m in (llama, qwen, nomic)}


# Special models behave like a model that can do everything.
SPECIAL_RECORD = {"capabilities": ["completion", "tools", "thinking", "embedding"]}


class _Gate:
    """Outer ASGI middleware: record the request, then injected hangs/failures, then Origin."""

    def __init__(self, app: Any, fake: FakeOllama) -> None:
        self.app, self.fake = app, fake

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body = await _read_body(receive)
        path = scope["path"]
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            name, text = key.decode("latin-1").lower(), value.decode("latin-1")
            headers[name] = f"{headers[name]}, {text}" if name in headers else text
        peer = scope.get("client") or ("", 0)
        recorded = Recorded(scope["method"], path, headers, body, _try_json(body), time.monotonic(),
                            f"{peer[0]}:{peer[1]}")
        self.fake.requests.append(recorded)  # (a test may trim the list meanwhile: keep our own)

        if path in self.fake.hang_paths:
            with contextlib.suppress(_HTTPError):
                await self.fake._hang(receive, path, "")
            return
        if path in self.fake.fail_paths:
            return await _JSON({"error": "injected failure"}, self.fake.fail_paths[path])(scope, receive, send)
        shape = self.fake.wrong_shape_for(path, recorded.json)
        if shape is not _NO_SHAPE:  # valid JSON, status 200, not what Ollama sends
            # escaped (big ints, NaN, lone surrogates too); one line, as a stream's reader expects it
            raw = json.dumps(shape, separators=(",", ":")).encode() + b"\n"
            return await Response(raw, 200, media_type=_JSON.media_type)(scope, receive, send)
        if "origin" in headers:  # like Ollama for an Origin outside OLLAMA_ORIGINS
            return await Response(status_code=403)(scope, receive, send)

        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read_body(receive: Callable) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _try_json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


class _Stream(StreamingResponse):
    """A StreamingResponse that always closes its body generator when it ends, so the
    generator's ``finally`` runs at once (on cancel, client disconnect or error)."""

    def __init__(self, body: AsyncGenerator[bytes, None], *, headers: dict[str, str]) -> None:
        super().__init__(body, headers=headers)
        self._generator = body  # the body_iterator, typed as what it is

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._generator.aclose()


async def _not_found(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("404 page not found", status_code=404)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("405 method not allowed", status_code=405)


class FakeOllama(OpenAIEndpoints):
    Error = _HTTPError
    model_error = MODEL_ERROR

    def __init__(self, *, version: str = "0.12.3", chunk_delay: float = 0.0,
                 reply: list[str] | None = None, embed_dim: int = 64) -> None:
        self.version = version
        self.chunk_delay = chunk_delay
        self.reply_delay = 0.0  # seconds before a non-streamed chat answer (an LLM's thinking time)
        self.hold_structured: anyio.Event | ThreadGate | None = None  # when set, structured answers wait for it
        # per request: the gate a structured answer waits for (None: none), when the kind of call decides
        self.hold_for: Callable[[dict[str, Any]], anyio.Event | None] | None = None
        self.reply = list(DEFAULT_REPLY if reply is None else reply)
        self.embed_dim = embed_dim
        self.embed_dims: dict[str, int] = {}
        # a misbehaving embedding model: texts containing this get a vector with a null in it
        self.embed_null_for: str | None = None
        self.models: dict[str, dict] = default_models()
        self.loaded: set[str] = {"llama3.2:latest"}  # what /api/ps lists
        self.blobs: dict[str, bytes] = {}
        self.requests: list[Recorded] = []
        self.hang_paths: set[str] = set()
        self.fail_paths: dict[str, int] = {}
        # answer 200 with this JSON value (of the wrong shape: [1, 2, 3], {"message": 5}...) to a
        # request for this path, or naming this model in its JSON body
        self.wrong_shapes: dict[str, Any] = {}
        self.structured: Callable[[dict], str] | None = None
        self.stream_events: list[StreamEvent] = []
        self.hangs: list[StreamEvent] = []  # one per hung request; ended when the client left
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=self._routes(),
            middleware=[Middleware(_Gate, fake=self)],
            exception_handlers={404: _not_found, 405: _not_allowed, _HTTPError: self._error_response},
        )

    # ----------------------------------------------------------- public helpers
    def transport(self) -> httpx.ASGITransport:
        return httpx.ASGITransport(app=self.app, client=("127.0.0.1", 40000))

    @contextlib.contextmanager
    def serve(self, port: int = 0) -> Iterator[str]:
        """Run the app under uvicorn on 127.0.0.1 (a free port unless told) in a thread; yield its base url."""
        config = uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="fake-ollama", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake Ollama server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(timeout=2)
            if thread.is_alive():  # a hung request still holds its connection
                server.force_exit = True
                thread.join(timeout=5)

    def wrong_shape_for(self, path: str, body: Any) -> Any:
        """The wrong-shape reply injected for this request (``wrong_shapes``), or ``_NO_SHAPE``."""
        if path in self.wrong_shapes:
            return self.wrong_shapes[path]
        model = body.get("model") if isinstance(body, dict) else None
        if isinstance(model, str) and model in self.wrong_shapes:
            return self.wrong_shapes[model]
        return _NO_SHAPE

    def requests_to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    # ------------------------------------------------------------------ routing
    def _routes(self) -> list[Route]:
        ps = Route("/api/ps", self._ps, methods=["GET"])
        if ps.methods is None:
            raise RuntimeError("a Route given methods has them")
        ps.methods.discard("HEAD")  # Ollama registers GET only
        return [
            Route("/", self._root, methods=["GET", "HEAD"]),
            Route("/api/version", self._version, methods=["GET", "HEAD"]),
            Route("/api/tags", self._tags, methods=["GET", "HEAD"]),
            ps,
            Route("/api/show", self._show, methods=["POST"]),
            Route("/api/chat", self._chat, methods=["POST"]),
            Route("/api/generate", self._generate, methods=["POST"]),
            Route("/api/embed", self._embed, methods=["POST"]),
            Route("/api/embeddings", self._embeddings, methods=["POST"]),
            Route("/api/pull", self._pull, methods=["POST"]),
            Route("/api/push", self._push, methods=["POST"]),
            Route("/api/create", self._create, methods=["POST"]),
            Route("/api/copy", self._copy, methods=["POST"]),
            Route("/api/delete", self._delete, methods=["DELETE"]),
            Route("/api/blobs/{digest}", self._blob, methods=["HEAD", "POST"]),
            Route("/v1/rerank", self._rerank, methods=["POST"]),  # a re-ranking server's (not Ollama's)
            *self._openai_routes(),
        ]

    async def _error_response(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _HTTPError)
        if request.url.path.startswith("/v1/"):
            return _JSON({"error": self._openai_error(exc.status, exc.message)}, exc.status)
        return _JSON({"error": exc.message}, exc.status)

    # ---------------------------------------------------------- request helpers
    async def _body(self, request: Request) -> dict:
        raw = await request.body()
        if not raw.strip():
            raise _HTTPError(400, "missing request body")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise _HTTPError(400, str(exc)) from None
        if not isinstance(data, dict):
            raise _HTTPError(400, f"json: cannot unmarshal {type(data).__name__} into Go value of type api.Request")
        return data

    @staticmethod
    def _model_name(req: dict, *keys: str) -> str:
        for key in keys or ("model",):
            if isinstance(req.get(key), str) and req[key]:
                return req[key]
        raise _HTTPError(400, "model is required")

    @staticmethod
    def _stream_flag(req: dict, default: bool = True) -> bool:
        value = req.get("stream")
        if value is None:
            return default
        if not isinstance(value, bool):
            raise _HTTPError(400, "json: cannot unmarshal into Go struct field .stream of type bool")
        return value

    def _lookup(self, name: str) -> dict:
        record = self.models.get(normalize(name))
        if record is None:
            raise _HTTPError(404, f"model '{name}' not found")
        return record

    async def _resolve_inference(self, name: str, request: Request) -> tuple[dict, str | None]:
        """The model record and special mode for an inference request.

        fail-500 / busy-503 answer with their error; hang waits until the client
        leaves (or the task is cancelled); slow-first waits 1 s before anything is
        sent; disconnect and midstream-error break the reply after two lines;
        garbled sends two good lines and then lines that are not JSON (a whole reply: JSON cut short).
        """
        mode = _special(name)
        if mode is None:
            return self._lookup(name), None
        if mode in SPECIAL_ERRORS:
            raise _HTTPError(*SPECIAL_ERRORS[mode])
        if mode == "hang":
            await self._hang(request.receive, request.url.path, name)
        if mode == "slow-first":
            await anyio.sleep(1)
        return SPECIAL_RECORD, mode

    async def _hang(self, receive: Callable, path: str, model: str) -> None:
        event = StreamEvent(path, model, time.monotonic())
        self.hangs.append(event)
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        finally:
            event.ended = time.monotonic()
        raise _HTTPError(499, "request canceled")  # nobody is listening any more

    def _check_chat_caps(self, req: dict, name: str, record: dict, action: str) -> None:
        caps = record["capabilities"]
        think = req.get("think")
        if think is not None and not isinstance(think, bool) and think not in THINK_LEVELS:
            raise _HTTPError(400, f'invalid think value: {json.dumps(think)} (must be "high", "medium", '
                                  f'"low", "max", true, or false)')
        if _think_on(think) and "thinking" not in caps:
            raise _HTTPError(400, f"{json.dumps(name)} does not support thinking")
        if "completion" not in caps:
            raise _HTTPError(400, f"{json.dumps(name)} does not support {action}")
        if req.get("tools") and "tools" not in caps:
            raise _HTTPError(400, f"{normalize(name)} does not support tools")

    # ------------------------------------------------------------ reply script
    def _plan(self, req: dict, record: dict, fmt: Any = None, think: bool = False,
              tools: list | None = None, messages: list | None = None) -> list[tuple[str, Any]]:
        """The scripted answer as (kind, value) steps: thinking, content, tool_call."""
        steps: list[tuple[str, Any]] = []
        if think and "thinking" in record["capabilities"]:
            steps += [("thinking", t) for t in THINKING]
        if fmt == "json" or isinstance(fmt, dict):
            steps.append(("content", self.structured(req) if self.structured else _empty_structure(fmt)))
        else:
            steps += [("content", piece) for piece in self.reply]
        last_role = messages[-1].get("role") if messages and isinstance(messages[-1], dict) else None
        if isinstance(tools, list) and tools and last_role != "tool":  # answer a tool result with text
            steps.append(("tool_call", _tool_call(tools)))
        return steps

    @staticmethod
    def _metrics(prompt_tokens: int, eval_tokens: int, started: float) -> dict[str, int]:
        prompt_tokens, eval_tokens = max(prompt_tokens, 1), max(eval_tokens, 1)
        load, prompt_d, eval_d = 1_334_875, 1_000_000 * prompt_tokens + 17_000, 20_000_000 * eval_tokens + 13_000
        elapsed = int((time.monotonic() - started) * 1e9)
        return {"total_duration": load + prompt_d + eval_d + elapsed, "load_duration": load,
                "prompt_eval_count": prompt_tokens, "prompt_eval_duration": prompt_d,
                "eval_count": eval_tokens, "eval_duration": eval_d}

    def _stream(self, path: str, model: str, lines: Sequence[dict | bytes], mode: str | None, *,
                error_line: bytes, media_type: str = "application/x-ndjson") -> Response:
        """One body write per line, chunk_delay between lines, a StreamEvent per body.

        A dict is sent as an NDJSON line, its ``created_at`` stamped when sent.
        ``disconnect`` drops the connection after two lines; ``midstream-error``
        sends ``error_line`` after two lines and ends the body.
        """

        async def body() -> AsyncGenerator[bytes, None]:
            event = StreamEvent(path, model, time.monotonic())
            self.stream_events.append(event)
            try:
                for i, line in enumerate(lines):
                    if i and self.chunk_delay:
                        await anyio.sleep(self.chunk_delay)
                    if i == 2 and mode == "disconnect":
                        raise InjectedDisconnect("fake Ollama dropped the connection")
                    if i == 2 and mode == "midstream-error":
                        yield error_line
                        return
                    if i == 2 and mode == "garbled":
                        for garbage in GARBLED_LINES:
                            yield garbage
                        return
                    if isinstance(line, dict):
                        line = _line({**line, "created_at": now_rfc3339()} if "created_at" in line else line)
                    event.sent += 1   # counted before it leaves: a line numbered ``sent`` or more has not
                    yield line
                event.completed = True
            finally:
                event.ended = time.monotonic()

        return _Stream(body(), headers={"content-type": media_type})

    def _reply(self, payload: dict, mode: str | None) -> Response:
        """A non-streamed reply; the special modes fail the way Ollama would."""
        if mode == "midstream-error":  # the runner died while Ollama aggregated the answer
            raise _HTTPError(500, MODEL_ERROR)
        if mode == "disconnect":
            return _dropped(_dumps(payload))
        if mode == "garbled":  # a body cut short, still labelled JSON
            body = _dumps(payload)
            return Response(body[: len(body) // 2], media_type="application/json")
        return _JSON(payload)

    # --------------------------------------------------------------- discovery
    async def _root(self, request: Request) -> Response:
        return PlainTextResponse("Ollama is running")

    async def _version(self, request: Request) -> Response:
        return _JSON({"version": self.version})

    async def _tags(self, request: Request) -> Response:
        return _JSON({"models": [{k: m[k] for k in TAG_FIELDS} for m in self.models.values()]})

    async def _ps(self, request: Request) -> Response:
        models = []
        for name in sorted(self.loaded & self.models.keys()):
            record = self.models[name]
            num_ctx = re.search(r"num_ctx (\d+)", record["parameters"])
            models.append({
                **{k: record[k] for k in ("name", "model", "size", "digest", "details")},
                "expires_at": now_rfc3339(timedelta(minutes=5)),
                "size_vram": record["size"], "context_length": int(num_ctx.group(1)) if num_ctx else 4096,
            })
        return _JSON({"models": models})

    async def _show(self, request: Request) -> Response:
        req = await self._body(request)
        record = self._lookup(self._model_name(req, "model", "name"))
        return _JSON({
            "license": record["license"], "modelfile": _modelfile(record),
            "parameters": record["parameters"], "template": record["template"], "system": record["system"],
            "details": record["details"], "model_info": record["model_info"],
            "capabilities": record["capabilities"], "modified_at": record["modified_at"],
        })

    # --------------------------------------------------------------- inference
    async def _chat(self, request: Request) -> Response:
        started = time.monotonic()
        req = await self._body(request)
        name = self._model_name(req)
        stream = self._stream_flag(req)
        record, mode = await self._resolve_inference(name, request)
        messages = req.get("messages") or []
        if not messages and _unloads(req.get("keep_alive")):
            return self._load_reply(name, "unload", {"message": {"role": "assistant", "content": ""}})
        self._check_chat_caps(req, name, record, "chat")
        if not messages:
            return self._load_reply(name, "load", {"message": {"role": "assistant", "content": ""}})
        self.loaded.add(normalize(name))

        steps = self._plan(req, record, req.get("format"), _think_on(req.get("think")), req.get("tools"), messages)
        metrics = self._metrics(_word_count(messages), len(steps), started)
        final = {"model": name, "created_at": now_rfc3339(), "message": {"role": "assistant", "content": ""},
                 "done": True, "done_reason": "stop", **metrics}
        if not stream:
            if self.reply_delay:
                await anyio.sleep(self.reply_delay)
            if self.hold_structured is not None and req.get("format"):
                await self.hold_structured.wait()
            gate = self.hold_for(req) if self.hold_for is not None and req.get("format") else None
            if gate is not None:
                await gate.wait()
            final["message"] = _aggregate_message(steps)
            return self._reply(final, mode)
        lines = [{"model": name, "created_at": "", "message": _step_message(kind, value), "done": False}
                 for kind, value in steps]
        return self._stream(request.url.path, name, [*lines, final], mode,
                            error_line=_line({"error": MODEL_ERROR}))

    async def _generate(self, request: Request) -> Response:
        started = time.monotonic()
        req = await self._body(request)
        name = self._model_name(req)
        stream = self._stream_flag(req)
        record, mode = await self._resolve_inference(name, request)
        prompt = req.get("prompt") or ""
        if not prompt and _unloads(req.get("keep_alive")):
            return self._load_reply(name, "unload", {"response": ""})
        self._check_chat_caps({**req, "tools": None}, name, record, "generate")
        if not prompt:
            return self._load_reply(name, "load", {"response": ""})
        self.loaded.add(normalize(name))

        steps = self._plan(req, record, req.get("format"), _think_on(req.get("think")))
        final: dict[str, Any] = {"model": name, "created_at": now_rfc3339(), "response": "",
                                 "done": True, "done_reason": "stop"}
        if not req.get("raw"):
            final["context"] = [_stable_int(w, 17) for w in [*prompt.split(), *self.reply]] or [1]
        final.update(self._metrics(_word_count(prompt), len(steps), started))
        if not stream:
            final["response"] = "".join(v for k, v in steps if k == "content")
            if thinking := "".join(v for k, v in steps if k == "thinking"):
                final["thinking"] = thinking
            return self._reply(final, mode)
        lines = [{"model": name, "created_at": "",
                  **({"response": value} if kind == "content" else {"response": "", "thinking": value}),
                  "done": False} for kind, value in steps]
        return self._stream(request.url.path, name, [*lines, final], mode,
                            error_line=_line({"error": MODEL_ERROR}))

    def _load_reply(self, name: str, reason: str, empty: dict) -> Response:
        (self.loaded.discard if reason == "unload" else self.loaded.add)(normalize(name))
        return _JSON({"model": name, "created_at": now_rfc3339(), **empty, "done": True, "done_reason": reason})

    # -------------------------------------------------------------- embeddings
    def _vectors(self, name: str, texts: list[str], dimensions: Any = None) -> list[list[float]]:
        dim = self.embed_dims.get(normalize(name), self.embed_dims.get(name, self.embed_dim))
        vectors: list[list[Any]] = [fake_embedding(t, dim) for t in texts]
        if self.embed_null_for:
            vectors = [[None, *v[1:]] if self.embed_null_for in t else v for t, v in zip(texts, vectors, strict=True)]
        if isinstance(dimensions, int) and not isinstance(dimensions, bool) and 0 < dimensions < dim:
            vectors = [_unit(v[:dimensions]) for v in vectors]
        return vectors

    @staticmethod
    def _texts(value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if value else []
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise _HTTPError(400, "invalid input type")

    async def _embed(self, request: Request) -> Response:
        started = time.monotonic()
        req = await self._body(request)
        name = self._model_name(req)
        _, mode = await self._resolve_inference(name, request)
        texts = self._texts(req.get("input"))
        if not texts:
            return _JSON({"model": name, "embeddings": []})
        metrics = self._metrics(sum(map(_word_count, texts)), 1, started)
        payload = {"model": name, "embeddings": self._vectors(name, texts, req.get("dimensions")),
                   "total_duration": metrics["total_duration"], "load_duration": metrics["load_duration"],
                   "prompt_eval_count": metrics["prompt_eval_count"]}
        if mode is None:  # thousands of floats: orjson writes them ~10x faster (the benches share the CPU)
            return Response(orjson.dumps(payload), media_type=_JSON.media_type)
        return self._reply(payload, mode)

    async def _embeddings(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req)
        _, mode = await self._resolve_inference(name, request)
        prompt = req.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            return _JSON({"embedding": []})
        return self._reply({"embedding": self._vectors(name, [prompt])[0]}, mode)

    async def _rerank(self, request: Request) -> Response:
        """``/v1/rerank`` as llama.cpp's server, vLLM, TEI and Infinity answer it, scored by
        ``overlap_score``; down, slow or garbage through ``fail_paths``, ``hang_paths`` and
        ``wrong_shapes`` like any path."""
        req = await self._body(request)
        query, documents, top_n = req.get("query"), req.get("documents"), req.get("top_n")
        if not isinstance(query, str) or not isinstance(documents, list) or not all(
                isinstance(d, str) for d in documents):
            raise _HTTPError(400, "query must be a string and documents a list of strings")
        scores = [overlap_score(query, document) for document in documents]
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
        if isinstance(top_n, int) and not isinstance(top_n, bool) and top_n > 0:
            order = order[:top_n]
        return _JSON({"model": req.get("model") or "fake-reranker", "object": "list",
                      "results": [{"index": i, "relevance_score": scores[i]} for i in order]})

    # -------------------------------------------------------- model management
    def _progress(self, request: Request, name: str, statuses: list[dict], stream: bool) -> Response:
        if not stream:
            return _JSON({"status": "success"})
        return self._stream(request.url.path, name, [*statuses, {"status": "success"}], None, error_line=b"")

    async def _pull(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req, "model", "name")
        key = normalize(name)
        if key not in self.models:
            self.models[key] = _model_record(
                key, "llama", "1.0B", ["completion"], parameters="", size=1_321_098_329,
                model_info={"general.architecture": "llama", "llama.context_length": 4096},
                template="{{ .Prompt }}", quantization="Q4_K_M", modified_at=now_rfc3339())
        digest = self.models[key]["digest"]
        total = self.models[key]["size"]
        return self._progress(request, name, [
            {"status": "pulling manifest"},
            {"status": f"pulling {digest[:12]}", "digest": f"sha256:{digest}", "total": total, "completed": total // 2},
            {"status": f"pulling {digest[:12]}", "digest": f"sha256:{digest}", "total": total, "completed": total},
            {"status": "verifying sha256 digest"},
            {"status": "writing manifest"},
        ], self._stream_flag(req))

    async def _push(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req, "model", "name")
        record = self._lookup(name)
        digest, total = record["digest"], record["size"]
        return self._progress(request, name, [
            {"status": "retrieving manifest"},
            {"status": f"pushing {digest[:12]}", "digest": f"sha256:{digest}", "total": total, "completed": total},
            {"status": "pushing manifest"},
        ], self._stream_flag(req))

    async def _create(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req)
        stream = self._stream_flag(req)
        base = self._lookup(req["from"]) if isinstance(req.get("from"), str) and req["from"] else None
        key = normalize(name)
        record = json.loads(json.dumps(base)) if base else _model_record(
            key, "llama", "1.0B", ["completion"], parameters="", size=1_000_000,
            model_info={"general.architecture": "llama", "llama.context_length": 4096},
            template="{{ .Prompt }}", quantization="Q4_K_M", modified_at="")
        record.update(name=key, model=key, modified_at=now_rfc3339(),
                      digest=hashlib.sha256(f"{key}{time.monotonic_ns()}".encode()).hexdigest())
        for field in ("system", "template", "license"):
            if isinstance(req.get(field), str):
                record[field] = req[field]
        if isinstance(req.get("parameters"), dict):
            record["parameters"] = "\n".join(f"{k} {json.dumps(v) if isinstance(v, str) else v}"
                                             for k, v in req["parameters"].items())
        self.models[key] = record
        layer = base["digest"] if base else record["digest"]
        return self._progress(request, name, [
            {"status": f"using existing layer sha256:{layer}"},
            {"status": "writing manifest"},
        ], stream)

    async def _copy(self, request: Request) -> Response:
        req = await self._body(request)
        source, destination = req.get("source"), req.get("destination")
        if not (isinstance(source, str) and source and isinstance(destination, str) and destination):
            raise _HTTPError(400, "source and destination are required")
        record = self.models.get(normalize(source))
        if record is None:
            raise _HTTPError(404, f"model {json.dumps(source)} not found")
        key = normalize(destination)
        self.models[key] = {**json.loads(json.dumps(record)), "name": key, "model": key, "modified_at": now_rfc3339()}
        return Response(status_code=200)

    async def _delete(self, request: Request) -> Response:
        req = await self._body(request)
        name = self._model_name(req, "model", "name")
        self._lookup(name)
        del self.models[normalize(name)]
        self.loaded.discard(normalize(name))
        return Response(status_code=200)

    async def _blob(self, request: Request) -> Response:
        digest = request.path_params["digest"]
        if request.method == "HEAD":
            return Response(status_code=200 if digest in self.blobs else 404)
        if not re.fullmatch(r"sha256[:-][0-9a-f]{64}", digest):
            raise _HTTPError(400, "invalid digest format")
        if digest in self.blobs:
            return Response(status_code=200)
        body = await request.body()
        if hashlib.sha256(body).hexdigest() != digest[7:]:
            raise _HTTPError(400, "digest mismatch")
        self.blobs[digest] = body
        return Response(status_code=201)


# ------------------------------------------------------------------ helpers
def _empty_structure(fmt: Any) -> str:
    if isinstance(fmt, dict) and isinstance(fmt.get("properties"), dict):
        return json.dumps({k: [] for k, v in fmt["properties"].items()
                           if isinstance(v, dict) and v.get("type") == "array"})
    return "{}"


def _step_message(kind: str, value: Any) -> dict:
    if kind == "thinking":
        return {"role": "assistant", "content": "", "thinking": value}
    if kind == "tool_call":
        return {"role": "assistant", "content": "", "tool_calls": [value]}
    return {"role": "assistant", "content": value}


def _aggregate_message(steps: list[tuple[str, Any]]) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(v for k, v in steps if k == "content")}
    if thinking := "".join(v for k, v in steps if k == "thinking"):
        message["thinking"] = thinking
    if calls := [v for k, v in steps if k == "tool_call"]:
        message["tool_calls"] = calls
    return message


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def _modelfile(record: dict) -> str:
    params = "".join(f"PARAMETER {line}\n" for line in record["parameters"].splitlines() if line)
    return (f'# Modelfile generated by "ollama show"\n# To build a new Modelfile based on this, replace FROM with:\n'
            f'# FROM {record["name"]}\n\nFROM /root/.ollama/models/blobs/sha256-{record["digest"]}\n'
            f'TEMPLATE """{record["template"]}"""\n{params}')


def _dropped(body: bytes) -> Response:
    """Headers announcing the whole body, half of it, then the connection drops."""

    async def half() -> AsyncGenerator[bytes, None]:
        yield body[: len(body) // 2]
        raise InjectedDisconnect("fake Ollama dropped the connection")

    return _Stream(half(), headers={"content-type": _JSON.media_type, "content-length": str(len(body))})


class _QuietInjectedDisconnect(logging.Filter):
    """uvicorn logs every exception raised by the app; the injected ones are expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], InjectedDisconnect))


logging.getLogger("uvicorn.error").addFilter(_QuietInjectedDisconnect())
