"""Several upstream Ollamas behind one ``Upstream`` (GRAPHGATE_UPSTREAM with more than one URL).

``Upstreams`` is an ``Upstream``: the relays, GraphGate's own model calls and the watcher use it as
they use one server, and it chooses a member per request:

- a request that names a model (chats, generations, embeddings, /api/show) goes to the reachable
  member that lists the model and has the fewest requests in flight (ties taken in turn); a
  member whose list is not known yet comes next, then any other reachable one (the model may have
  been pulled since the last check: Ollama answers with the real error if not), then those marked
  down (so that, with none reachable, the error is the upstream's own);
- /api/tags, /api/ps and /v1/models are asked of every reachable member and merged (a model two
  members hold is listed once);
- model management (pull, push, create, copy, delete, blobs) goes to the first reachable member in
  GRAPHGATE_UPSTREAM's order that lists the model it names, else the first reachable one: a blob
  and the model created from it must land on the same server, and a pull's progress stream is one
  server's. To place a model on a given upstream, talk to that Ollama directly.

A member that cannot be connected to (refused, or not within the connect timeout) is marked down and
the request (when its body can be sent again) goes to the next candidate. A member marked down gets
no requests (unless none is up: then the error is its own) until it answers again: once its back-off
has passed, the next request that looks for a member starts a check of it in the background
(/api/version), and the watcher (proxy/upstream/pool_watch.py) checks every member on its rounds.
One URL builds a plain ``Upstream`` instead (proxy/app.py): the single-upstream path pays nothing
for this.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import orjson

from proxy.core import json_text
from proxy.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from proxy.core.setting_parsers import url_list
from proxy.core.settings_sections import UpstreamSettings
from proxy.monitoring.metrics import SERVED_BY
from proxy.upstream.client import Headers, Upstream
from proxy.upstream.watch import normalize, safe_url

# the paths whose JSON body names the model the request is for (relayed or GraphGate's own)
MODEL_PATHS = frozenset({"/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show",
                         "/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
MANAGEMENT_PATHS = frozenset({"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete"})
MERGED_LISTS = {"/api/tags": ("models", ("name", "model")), "/api/ps": ("models", ("name", "model")),
                "/v1/models": ("data", ("id",))}
FIRST_RETRY = 2.0   # seconds a member that failed to connect is skipped; doubled per failure in a row
LAST_RETRY = 30.0   # (the watcher's interval: by then it has been checked again anyway)
TRACKED = "graphgate.upstream"   # the response extension naming the member a response came from


@dataclass(eq=False)
class Member:
    """One upstream of the pool and what is known of it."""

    client: Upstream
    index: int
    url: str                                # without credentials
    reachable: bool | None = None           # None: not checked, nothing failed yet
    version: str | None = None
    models: frozenset[str] | None = None    # normalised names it lists; None: unknown
    in_flight: int = 0
    requests: int = 0                       # requests sent to it
    failures: int = 0                       # connections to it that failed
    last_error: str | None = None
    retry_at: float = 0.0
    down_in_a_row: int = 0
    probing: bool = False                   # a check of whether it is back is under way

    def usable(self) -> bool:
        return self.reachable is not False

    def lists(self, model: str) -> bool | None:
        return None if self.models is None else normalize(model) in self.models

    def mark_down(self, error: str) -> None:
        self.last_error = error
        if self.reachable is False and time.monotonic() < self.retry_at:
            return  # another request that was under way when it went: the back-off stands
        self.reachable = False
        self.down_in_a_row += 1
        self.retry_at = time.monotonic() + min(FIRST_RETRY * 2 ** (self.down_in_a_row - 1), LAST_RETRY)

    def mark_up(self) -> None:
        if self.reachable is not True:
            self.reachable, self.last_error, self.down_in_a_row = True, None, 0

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "reachable": self.reachable, "version": self.version,
                "models": None if self.models is None else len(self.models), "in_flight": self.in_flight,
                "requests": self.requests, "failures": self.failures, "error": self.last_error}


def not_connected(exc: UpstreamError) -> bool:
    """Whether the request never reached the upstream: refused, no route, or no connection within
    GRAPHGATE_CONNECT_TIMEOUT (a firewalled host). Then it may go to another one."""
    if isinstance(exc, UpstreamUnavailable):
        return True
    return isinstance(exc, UpstreamTimeout) and (isinstance(exc.__cause__, httpx.ConnectTimeout)
                                                 or "no connection within" in exc.message)


class _Released(httpx.AsyncByteStream):
    """A member's response body that gives its request slot back when the response is closed
    (relayed to its end, or the client gone)."""

    def __init__(self, stream: Any, member: Member) -> None:
        self._stream, self._member, self._open = stream, member, True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._member.in_flight -= 1
        await self._stream.aclose()


class Upstreams(Upstream):
    def __init__(self, settings: UpstreamSettings, urls: Sequence[str], *,
                 transports: Mapping[str, httpx.AsyncBaseTransport] | None = None) -> None:
        # (no Upstream.__init__: the pool holds no connections of its own, its members do)
        transports = transports or {}
        self.members = [Member(Upstream(settings, transports.get(url), url=url), i, safe_url(url))
                        for i, url in enumerate(urls)]
        self.url = ", ".join(member.url for member in self.members)
        self.name = "upstream Ollama"
        self._settings = settings
        self._injected = transports.get(urls[0])
        self._closes_transport = False
        self._turn = itertools.count()
        self._probes: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        for task in self._probes:
            task.cancel()
        for member in self.members:
            await member.client.aclose()

    # --- choosing ---

    def candidates(self, model: str | None, *, in_order: bool = False) -> list[Member]:
        """The members to try, best first (see the module's docstring)."""
        now, turn, count = time.monotonic(), next(self._turn), len(self.members)
        for member in self.members:
            if member.reachable is False and now >= member.retry_at and not member.probing:
                self._probe_soon(member)

        def rank(member: Member) -> tuple[int, int, int]:
            if not member.usable():
                group = 3
            elif model is None or member.lists(model) is None:
                group = 1 if model else 0
            else:
                group = 0 if member.lists(model) else 2
            if in_order:
                return group, 0, member.index
            return group, member.in_flight, (member.index - turn) % count

        return sorted(self.members, key=rank)

    def pick(self, model: str | None) -> Member:
        return self.candidates(model)[0]

    def _route(self, path: str, content: Any) -> tuple[str | None, bool]:
        """(the model the request is for, whether members are taken in their configured order)."""
        if path.startswith("/v1/models/"):
            return path.removeprefix("/v1/models/"), False
        management = path in MANAGEMENT_PATHS or path.startswith("/api/blobs/")
        if not (management or path in MODEL_PATHS) or not isinstance(content, (bytes, bytearray)):
            return None, management
        try:
            body = orjson.loads(content)
        except ValueError:
            return None, management
        if not isinstance(body, dict):
            return None, management
        model = body.get("model") or body.get("name") or body.get("source")
        return (model if isinstance(model, str) else None), management

    # --- the Upstream interface ---

    async def open(self, method: str, path: str, *, headers: Headers = (), content: Any = None,
                   params: Any = None) -> httpx.Response:
        if method == "GET" and path in MERGED_LISTS:
            return await self._merged(path, headers=list(headers), params=params)
        model, in_order = self._route(path, content)
        again = content is None or isinstance(content, (bytes, bytearray, str))  # a stream is sent once
        failed: UpstreamError | None = None
        for member in self.candidates(model, in_order=in_order):
            SERVED_BY.set(member.url)
            member.in_flight += 1
            member.requests += 1
            try:
                response = await member.client.open(method, path, headers=headers, content=content, params=params)
            except UpstreamError as exc:
                member.in_flight -= 1
                if not not_connected(exc):
                    raise
                self._failed(member, exc)
                failed = failed or exc
                if again:
                    continue
                raise
            except BaseException:
                member.in_flight -= 1
                raise
            member.mark_up()
            response.stream = _Released(response.stream, member)
            response.extensions = {**response.extensions, TRACKED: member}
            return response
        assert failed is not None
        raise failed

    async def iter_raw(self, response: httpx.Response) -> AsyncIterator[bytes]:
        async for chunk in self._client_of(response).iter_raw(response):
            yield chunk

    async def read(self, response: httpx.Response) -> bytes:
        return await self._client_of(response).read(response)

    async def call_json(self, method: str, path: str, body: Any = None, *,
                        deadline: float | None = None) -> Any:
        if method == "GET" and path in MERGED_LISTS:   # read as one member's reply would be
            merged = await self._merged(path)
            return self.reply_json(path, merged.status_code, await merged.aread())
        model = body.get("model") if isinstance(body, dict) else None
        failed: UpstreamError | None = None
        for member in self.candidates(model if isinstance(model, str) else None):
            SERVED_BY.set(member.url)
            member.in_flight += 1
            member.requests += 1
            try:
                reply = await member.client.call_json(method, path, body, deadline=deadline)
            except UpstreamError as exc:
                if not not_connected(exc):
                    raise
                self._failed(member, exc)
                failed = failed or exc
                continue
            finally:
                member.in_flight -= 1
            member.mark_up()
            return reply
        assert failed is not None
        raise failed

    # --- helpers ---

    def _probe_soon(self, member: Member) -> None:
        """Ask a member that is down, its back-off over, whether it is back (/api/version), in the
        background: no client's request pays for finding out (a firewalled host takes the whole
        connect timeout to fail)."""
        member.probing = True
        task = asyncio.get_running_loop().create_task(self._probe(member), name="upstream-probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _probe(self, member: Member) -> None:
        try:
            await member.client.call_json("GET", "/api/version", deadline=self._settings.discovery_timeout)
        except UpstreamError as exc:
            member.mark_down(exc.message.replace(member.client.url, member.url))
        else:
            member.mark_up()
        finally:
            member.probing = False

    def _client_of(self, response: httpx.Response) -> Upstream:
        member = response.extensions.get(TRACKED)
        return member.client if isinstance(member, Member) else self.members[0].client

    def _failed(self, member: Member, exc: UpstreamError) -> None:
        member.failures += 1
        member.mark_down(exc.message.replace(member.client.url, member.url))

    async def _merged(self, path: str, *, headers: list[tuple[str, str]] | None = None,
                      params: Any = None) -> httpx.Response:
        """Every usable member's list (``path``) in one, each model once; the first member's error
        when none answers."""
        key, names = MERGED_LISTS[path]
        members = [m for m in self.members if m.usable()] or list(self.members)
        replies: list[tuple[Member, httpx.Response | UpstreamError, bytes]] = [None] * len(members)  # type: ignore[list-item]
        deadline = self._settings.discovery_timeout

        async def one(i: int, member: Member) -> None:
            try:
                response, body = await member.client.fetch("GET", path, headers=headers or (), params=params,
                                                           deadline=deadline)
            except UpstreamError as exc:
                if not_connected(exc):
                    self._failed(member, exc)
                replies[i] = (member, exc, b"")
                return
            member.mark_up()
            replies[i] = (member, response, body)

        async with anyio.create_task_group() as group:
            for i, member in enumerate(members):
                group.start_soon(one, i, member)
        merged: dict[str, Any] | None = None
        seen: set[str] = set()
        first: httpx.Response | None = None
        for member, response, body in replies:
            if isinstance(response, UpstreamError) or response.status_code != 200:
                continue
            with contextlib.suppress(ValueError):   # an unreadable list is skipped
                json_text.refuse_too_deep(body, json_text.FIELD_DEPTH)   # orjson writes at most 254 levels
                data = orjson.loads(body)
                if not isinstance(data, dict) or not isinstance(data.get(key), list):
                    continue
                if merged is None:
                    merged, first = {**data, key: []}, response
                for entry in data[key]:
                    name = next((entry[n] for n in names if isinstance(entry, dict) and isinstance(entry.get(n), str)),
                                None)
                    if name is None or normalize(name) not in seen:
                        merged[key].append(entry)
                    if name is not None:
                        seen.add(normalize(name))
                if path == "/api/tags":
                    member.models = frozenset(normalize(n) for e in data[key] if isinstance(e, dict)
                                              for n in [e.get("name") or e.get("model")] if isinstance(n, str))
        if merged is None or first is None:
            for _member, response, body in replies:
                if isinstance(response, httpx.Response):
                    return httpx.Response(response.status_code, headers=response.headers, content=body)
            error = replies[0][1]
            assert isinstance(error, UpstreamError)
            raise error
        headers_out = [(k, v) for k, v in first.headers.items()
                       if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")]
        return httpx.Response(200, headers=headers_out, content=orjson.dumps(merged))


def connect(settings: UpstreamSettings, *, transport: httpx.AsyncBaseTransport | None = None,
            transports: Mapping[str, httpx.AsyncBaseTransport] | None = None) -> Upstream:
    """The upstream GRAPHGATE_UPSTREAM names: a plain ``Upstream`` for one URL (``transport`` or
    ``transports``' entry for it: an in-process server), a pool for several."""
    urls = url_list(settings.upstream)
    if len(urls) == 1:
        return Upstream(settings, transport or (transports or {}).get(urls[0]), url=urls[0])
    return Upstreams(settings, urls, transports=transports)
