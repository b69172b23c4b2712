"""The one boundary to the upstream Ollama. httpx's errors and the JSON client's are translated
here and nowhere else.

``Upstream.open`` starts a request (through httpx) and returns the response with its body unread,
so the caller decides whether to relay it as a stream or read it whole. ``Upstream.call_json`` is
for GraphGate's own calls (extraction, embeddings, model info): over the lean ``JsonClient`` (see
there why), or over the injected httpx transport when there is one (the in-process tests), and it
raises on any error status with the upstream's own message. ``Upstream.sibling`` is the same
boundary for another server GraphGate calls itself (the optional re-ranking server).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
import httpx
import orjson

from proxy.core import json_text
from proxy.core.errors import (
    BadRequest,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamShapeError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.core.settings_sections import UpstreamSettings
from proxy.upstream.json_client import ConnectFailed, JsonClient, ProtocolViolation
from proxy.upstream.paths import check_path, within
from proxy.upstream.relay_transport import RelayTransport

Headers = Iterable[tuple[str, str]]


class Upstream:
    def __init__(self, settings: UpstreamSettings, transport: httpx.AsyncBaseTransport | None = None, *,
                 url: str | None = None, name: str = "upstream Ollama", closes_transport: bool = True) -> None:
        self.url = url or settings.upstream
        self.name = name  # how errors name the server: "upstream Ollama at <url> timed out: ..."
        self._settings = settings
        self._injected = transport
        self._closes_transport = closes_transport
        self._timeout = httpx.Timeout(connect=settings.connect_timeout, read=settings.read_timeout,
                                      write=settings.read_timeout, pool=None).as_dict()
        # The transport, not an AsyncClient: a client would keep one cookie jar for all users and
        # add headers of its own (User-Agent, Accept); the proxy must forward what it was sent.
        # No cap on connections in use: a waiting pool slot would look like a hang to a chatting
        # user. Idle ones are dropped well before a server's keep-alive timeout (see http11.py).
        self._transport = transport or RelayTransport()
        self._json = None if transport is not None else JsonClient(
            self.url, connect_timeout=settings.connect_timeout, read_timeout=settings.read_timeout)

    def sibling(self, url: str, name: str) -> Upstream:
        """Another server GraphGate sends its own JSON calls to (a re-ranking server, say), through
        this same boundary and its error translation: over connections of its own, or over this
        one's injected transport (the in-process tests), which it then leaves open."""
        return Upstream(self._settings, self._injected, url=url, name=name,
                        closes_transport=self._injected is None)

    async def aclose(self) -> None:
        if self._json is not None:
            await self._json.aclose()
        if self._closes_transport:
            await self._transport.aclose()

    def translate(self, exc: Exception) -> UpstreamError:
        """Turn an httpx exception into GraphGate's error with a message a user can act on."""
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            return UpstreamTimeout(f"{self.name} at {self.url} timed out: {detail}")
        if isinstance(exc, (httpx.ConnectError, httpx.UnsupportedProtocol)):
            return UpstreamUnavailable(f"{self.name} at {self.url} is unreachable: {detail}")
        if isinstance(exc, httpx.HTTPError):
            return UpstreamProtocolError(f"{self.name} at {self.url} failed: {detail}")
        return UpstreamProtocolError(f"{self.name} at {self.url} failed: {detail}")

    async def open(self, method: str, path: str, *, headers: Headers = (), content: Any = None,
                   params: Any = None) -> httpx.Response:
        """Send a request and return the response with its body not yet read."""
        # header values go as the bytes the client sent (ASGI decodes them as latin-1); httpx would
        # refuse a non-ASCII str value
        raw = [(_latin1(k), _latin1(v)) for k, v in headers]
        check_path(path)   # never above the upstream URL's own path (``..``, escaped or not)
        try:
            request = httpx.Request(method, self.url + path, params=params, headers=raw,
                                    content=content, extensions={"timeout": self._timeout})
        except httpx.InvalidURL as exc:
            raise BadRequest(f"cannot forward {path!r}: {exc}") from None
        if not within(httpx.URL(self.url), request.url):
            raise BadRequest(f"cannot forward {path[:200]!r}: it leads outside {self.name}'s URL")
        try:
            return await self._transport.handle_async_request(request)
        except (httpx.HTTPError, OSError) as exc:
            raise self.translate(exc) from exc

    async def fetch(self, method: str, path: str, *, deadline: float, headers: Headers = (),
                    content: Any = None, params: Any = None) -> tuple[httpx.Response, bytes]:
        """A whole small reply within ``deadline`` seconds in all (not just between bytes)."""
        try:
            with anyio.fail_after(deadline):
                response = await self.open(method, path, headers=headers, content=content, params=params)
                return response, await self.read(response)
        except TimeoutError:
            raise UpstreamTimeout(f"{self.name} at {self.url} timed out: no answer to {path} "
                                  f"within {deadline:g} s") from None

    async def iter_raw(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The response body as the upstream wrote it, chunk by chunk, errors translated."""
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except (httpx.HTTPError, OSError) as exc:
            raise self.translate(exc) from exc

    async def read(self, response: httpx.Response) -> bytes:
        try:
            return await response.aread()
        except (httpx.HTTPError, OSError) as exc:
            raise self.translate(exc) from exc
        finally:
            await response.aclose()

    async def call_json(self, method: str, path: str, body: Any = None, *,
                        deadline: float | None = None) -> Any:
        """GraphGate's own JSON call: the parsed reply, or an UpstreamError naming the cause."""
        check_path(path)
        content = None if body is None else orjson.dumps(body)  # a chunk's prompt, a batch of texts: C-fast
        if self._json is not None:
            status, raw = await self._call_lean(method, path, content, deadline)
        else:
            headers = [("content-type", "application/json")] if content is not None else []
            if deadline is None:
                response = await self.open(method, path, headers=headers, content=content)
                raw = await self.read(response)
            else:
                response, raw = await self.fetch(method, path, deadline=deadline, headers=headers, content=content)
            status = response.status_code
        return self.reply_json(path, status, raw)

    def reply_json(self, path: str, status: int, raw: bytes) -> dict[str, Any]:
        """A reply to GraphGate's own call read: its object, or the UpstreamError that says why not."""
        if status >= 400:
            raise UpstreamStatusError(_error_message(raw, status), status=status)
        try:
            json_text.refuse_too_deep(raw, json_text.BODY_DEPTH)   # what reads the reply may recurse
            data = orjson.loads(raw)  # embeddings: thousands of floats a reply, ~10x faster than json
        except ValueError as exc:
            raise UpstreamProtocolError(f"{self.name} at {self.url} sent invalid JSON for {path}: {exc}") from exc
        if not isinstance(data, dict):  # every Ollama endpoint GraphGate calls answers an object
            raise self.wrong_shape(path, f"expected an object, got {json_kind(data)}")
        return data

    def wrong_shape(self, path: str, detail: str) -> UpstreamShapeError:
        """The error for a reply to GraphGate's own call whose JSON is not what Ollama sends."""
        return UpstreamShapeError(f"{self.name} at {self.url} answered {path} with JSON of the wrong shape: "
                                  f"{detail}")

    def chat_content(self, reply: dict[str, Any], path: str = "/api/chat") -> str:
        """A non-streamed chat reply's ``message.content``, or ``wrong_shape``."""
        message = reply.get("message")
        if not isinstance(message, dict):
            raise self.wrong_shape(path, f"its message is {json_kind(message)}, not an object")
        content = message.get("content", "")
        if not isinstance(content, str):
            raise self.wrong_shape(path, f"its message content is {json_kind(content)}, not a string")
        return content

    async def _call_lean(self, method: str, path: str, content: bytes | None,
                         deadline: float | None) -> tuple[int, bytes]:
        assert self._json is not None
        try:
            return await self._json.request(method, path, content, deadline=deadline)
        except TimeoutError as exc:
            limit = deadline if deadline is not None else self._json.read_timeout
            detail = str(exc) or f"no answer to {path} within {limit:g} s"
            raise UpstreamTimeout(f"{self.name} at {self.url} timed out: {detail}") from None
        except ConnectFailed as exc:
            raise UpstreamUnavailable(f"{self.name} at {self.url} is unreachable: {exc.strerror or exc}") from exc
        except (ProtocolViolation, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise UpstreamProtocolError(f"{self.name} at {self.url} failed: {reason}") from exc

    async def chat_text(self, model: str, messages: list[dict[str, Any]]) -> AsyncIterator[str]:
        """A streamed /api/chat reply's text, piece by piece (GraphGate's own call, e.g. the
        console's playground); an UpstreamError on an error status, an error line, a line that is
        not JSON, or a stream that ends before ``done``."""
        body = json.dumps({"model": model, "messages": messages, "stream": True}).encode()
        response = await self.open("POST", "/api/chat", headers=[("content-type", "application/json")], content=body)
        try:
            if response.status_code >= 400:
                raw = await self.read(response)
                raise UpstreamStatusError(_error_message(raw, response.status_code), status=response.status_code)
            buffer = b""
            async for chunk in self.iter_raw(response):
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        data = json_text.loads(line, max_depth=json_text.BODY_DEPTH)
                    except json_text.JSONTooDeep as exc:
                        raise UpstreamProtocolError(f"{self.name} at {self.url} sent a line {exc}: "
                                                    f"{line[:80]!r}") from None
                    except ValueError:
                        raise UpstreamProtocolError(f"{self.name} at {self.url} sent a line that is not "
                                                    f"JSON: {line[:80]!r}") from None
                    if not isinstance(data, dict):
                        raise self.wrong_shape("/api/chat", f"a line is {json_kind(data)}, not an object")
                    if data.get("error"):
                        raise UpstreamProtocolError(f"the model failed: {data['error']}")
                    content = self.chat_content(data) if "message" in data else ""
                    if content:
                        yield content
                    if data.get("done"):
                        return
            raise UpstreamProtocolError(f"{self.name} at {self.url} ended the answer before it was done")
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


def _error_message(raw: bytes, status: int) -> str:
    try:
        data = json_text.loads(raw, max_depth=json_text.BODY_DEPTH)
        if isinstance(data, dict) and data.get("error"):
            error = data["error"]
            return str(error.get("message", error)) if isinstance(error, dict) else str(error)
    except ValueError:
        pass
    text = raw.decode("utf-8", "replace").strip()
    return text or f"upstream answered HTTP {status}"


def json_kind(value: Any) -> str:
    """A JSON value named for an error message: its type and the start of it."""
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
    text = orjson.dumps(value).decode()[:60] if value is not None else ""
    return f"{kind} {text}".strip()


def _latin1(value: str | bytes) -> bytes:
    return value.encode("latin-1") if isinstance(value, str) else value
