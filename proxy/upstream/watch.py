"""What the upstream Ollama looks like right now: reachable or not, its version, and whether the
models GraphGate needs (extraction, embedding, keywords) are there.

``UpstreamWatcher.run`` checks at start-up and then every ``interval`` seconds, as a task of the
app's life (``watching``), and logs each change of state once: one warning when the upstream becomes unreachable
or a needed model goes missing (not again while that stays so), one info line when it is back.
``latest`` is what /rag/health and the console read: the last result, or a fresh check when it is
older than they accept. Checks never overlap (callers arriving during one share its result, however
long it took), so the upstream sees at most one check every few seconds whatever the rate of health
requests, and a whole check is bounded by GRAPHGATE_DISCOVERY_TIMEOUT.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno as errnos
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio

from proxy.core.errors import GraphGateError, UpstreamStatusError, UpstreamTimeout, UpstreamUnavailable
from proxy.core.settings_sections import UpstreamSettings
from proxy.upstream.client import Upstream
from proxy.upstream.model_calls import first_chat_model

log = logging.getLogger("graphgate.upstream")

WATCH_SECONDS = 30.0  # between background checks
FRESH_SECONDS = 5.0   # a result this recent is answered as it is; an older one is checked again first


def safe_url(url: str) -> str:
    """The URL without what must not be shown: user and password, query, fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def normalize(name: str) -> str:
    """Ollama's own name matching: a name without a tag means ``:latest``; case does not count."""
    return (name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest").lower()


@dataclass(frozen=True)
class ModelState:
    role: str                 # "extraction", "embedding" or "keywords"
    name: str | None          # None: the extraction model is unset and no upstream model can chat
    setting: str              # the variable that names it
    configured: bool          # named by the setting (False: chosen by the rule)
    present: bool | None      # None: unknown (the upstream's list could not be read)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "present": self.present, "setting": self.setting,
                "chosen": "configured" if self.configured else "first model with completion capability"}


@dataclass(frozen=True)
class UpstreamState:
    url: str                          # without credentials
    reachable: bool                   # answered /api/version as Ollama does
    version: str | None
    error: str | None                 # why it is not reachable, as a sentence saying what to do
    checked_at: datetime
    checked: float                    # time.monotonic() when the check ended (its age counts from then)
    latency_ms: float | None
    models: tuple[str, ...] | None    # the names /api/tags lists; None when unknown
    roles: tuple[ModelState, ...] = ()
    # sentences for the state of the models (missing, or the list unreadable), keyed for the log
    model_problems: dict[str, str] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        return [self.error] if self.error else list(self.model_problems.values())

    def age(self) -> float:
        return time.monotonic() - self.checked

    def role(self, name: str) -> ModelState | None:
        return next((r for r in self.roles if r.role == name), None)

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "reachable": self.reachable, "version": self.version, "error": self.error,
                "checked_at": self.checked_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
                "age_seconds": round(self.age(), 1), "latency_ms": self.latency_ms}


class UpstreamWatcher:
    def __init__(self, upstream: Upstream, settings: UpstreamSettings, *, interval: float = WATCH_SECONDS,
                 chosen_model: Callable[[], str | None] = lambda: None) -> None:
        """``chosen_model``: the extraction model ingestion has already chosen by the rule, if any:
        reported as is (the rule's answer changes when a newer chat model is pulled; ingestion's not)."""
        self.chosen_model = chosen_model
        self.upstream = upstream
        self.settings = settings
        self.interval = interval
        self.url = safe_url(upstream.url)
        self.state: UpstreamState | None = None
        self.checks = 0
        self._lock = anyio.Lock()
        self._capabilities: dict[tuple[str, str], list[str]] = {}  # (name, digest) -> capabilities
        # what the log last said: the upstream's problem, and each model's
        self._reported_down: bool | None = None
        self._reported_models: dict[str, str] = {}

    def members(self) -> list[dict[str, Any]]:
        """Each upstream as /rag/health and the metrics show it (here the one), from the last check
        (none yet: empty). Requests in flight are counted only with several upstreams."""
        state = self.state
        if state is None:
            return []
        return [{"url": state.url, "reachable": state.reachable, "version": state.version,
                 "models": None if state.models is None else len(state.models), "in_flight": None,
                 "requests": None, "failures": None, "error": state.error}]

    async def run(self) -> None:
        """Check now, then every ``interval`` seconds, until cancelled."""
        while True:
            try:
                await self.latest(0)
            except Exception:  # noqa: BLE001 - a bug here must not take the gateway down with it
                log.exception("checking the upstream failed")
            await anyio.sleep(self.interval)

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """``run`` in the background while the body runs. A task of its own, not a task group around
        the app's whole life: a group would wrap every exception that leaves the lifespan (a refused
        start-up, a CLI command's error) in an ExceptionGroup."""
        task = asyncio.get_running_loop().create_task(self.run(), name="upstream-watch")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])  # (not `await task`: that would swallow our own cancellation)

    async def latest(self, max_age: float = FRESH_SECONDS) -> UpstreamState:
        """The last result if it is at most ``max_age`` seconds old, else a new check's."""
        state = self.state
        if state is not None and state.age() <= max_age:
            return state
        seen = self.checks
        async with self._lock:  # one check at a time; whoever waited for it takes its result
            state = self.state
            if state is not None and (self.checks != seen or state.age() <= max_age):
                return state
            state = dataclasses.replace(await self._check(), checked=time.monotonic())
            self.state = state
            self.checks += 1
            self._report(state)
            return state

    # --- one check ---

    async def _check(self) -> UpstreamState:
        """One check, all of it within GRAPHGATE_DISCOVERY_TIMEOUT (an upstream that accepts and never
        answers costs one timeout, not one per call)."""
        started, at = time.monotonic(), datetime.now(UTC)
        budget = self.settings.discovery_timeout
        try:
            with anyio.fail_after(budget):
                reply = await self.upstream.call_json("GET", "/api/version", deadline=budget)
            version = reply.get("version") if isinstance(reply, dict) else None
            if not isinstance(version, str):
                raise ValueError(f"its /api/version answer has no version: {str(reply)[:80]}")
        except TimeoutError:
            return self._down(UpstreamTimeout(f"no answer within {budget:g} s"), at, started)
        except (GraphGateError, ValueError) as exc:
            return self._down(exc, at, started)
        latency = round((time.monotonic() - started) * 1000, 1)
        try:
            with anyio.fail_after(max(budget - (time.monotonic() - started), 0.05)):
                tags = await self.upstream.call_json("GET", "/api/tags", deadline=budget)
                entries = tags.get("models") if isinstance(tags, dict) else None
                if not isinstance(entries, list):
                    raise ValueError("its /api/tags answer has no model list")
                names = tuple(n for e in entries if isinstance(e, dict)
                              for n in [e.get("name") or e.get("model")] if isinstance(n, str))
                roles = await self._roles(entries, names)
        except (GraphGateError, ValueError, TimeoutError) as exc:
            reason = f"no answer within {budget:g} s" if isinstance(exc, TimeoutError) else self._reason(exc)
            problem = (f"the models of upstream Ollama at {self.url} could not be listed ({reason}): "
                       "check that it is a working Ollama server")
            return UpstreamState(self.url, True, version, None, at, started, latency, None,
                                 self._unknown_roles(), {"models": problem})
        return UpstreamState(self.url, True, version, None, at, started, latency, names, roles,
                             self._missing(roles))

    def _down(self, exc: Exception, at: datetime, started: float) -> UpstreamState:
        return UpstreamState(self.url, False, None, self._unreachable(exc), at, started, None, None,
                             self._unknown_roles())

    async def _roles(self, entries: list[Any], names: Sequence[str]) -> tuple[ModelState, ...]:
        settings = self.settings
        listed = {normalize(n) for n in names}
        if settings.llm_model:
            extraction = ModelState("extraction", settings.llm_model, "GRAPHGATE_LLM_MODEL", True,
                                    normalize(settings.llm_model) in listed)
        else:
            digests = {(e.get("model") or e.get("name")): str(e.get("digest", "")) for e in entries
                       if isinstance(e, dict)}

            async def capabilities(name: str) -> list[str]:
                key = (name, digests.get(name, ""))  # a model's capabilities change only with its digest
                if key not in self._capabilities:
                    show = await self.upstream.call_json("POST", "/api/show", {"model": name},
                                                         deadline=settings.discovery_timeout)
                    found = show.get("capabilities") if isinstance(show, dict) else None
                    self._capabilities[key] = found if isinstance(found, list) else []
                return self._capabilities[key]

            chosen = self.chosen_model() or await first_chat_model(entries, capabilities)
            # (ingestion's choice may have been deleted upstream since: then it is missing)
            extraction = ModelState("extraction", chosen, "GRAPHGATE_LLM_MODEL", False,
                                    chosen is not None and normalize(chosen) in listed)
        roles = [extraction, ModelState("embedding", settings.embed_model, "GRAPHGATE_EMBED_MODEL", True,
                                        normalize(settings.embed_model) in listed)]
        if settings.keyword_model and settings.keywords == "llm":
            roles.append(ModelState("keywords", settings.keyword_model, "GRAPHGATE_KEYWORD_MODEL", True,
                                    normalize(settings.keyword_model) in listed))
        return tuple(roles)

    def _unknown_roles(self) -> tuple[ModelState, ...]:
        settings = self.settings
        roles = [ModelState("extraction", settings.llm_model, "GRAPHGATE_LLM_MODEL", bool(settings.llm_model), None),
                 ModelState("embedding", settings.embed_model, "GRAPHGATE_EMBED_MODEL", True, None)]
        if settings.keyword_model and settings.keywords == "llm":
            roles.append(ModelState("keywords", settings.keyword_model, "GRAPHGATE_KEYWORD_MODEL", True, None))
        return tuple(roles)

    def _missing(self, roles: Sequence[ModelState]) -> dict[str, str]:
        problems = {}
        for role in roles:
            if role.present:
                continue
            if role.name is None:
                problems[role.role] = (f"no model of upstream Ollama at {self.url} can chat (none has the completion "
                                       "capability), so documents cannot be ingested: run `ollama pull llama3.2` "
                                       "or set GRAPHGATE_LLM_MODEL")
            else:
                what = {"extraction": "extraction model", "embedding": "embedding model",
                        "keywords": "keyword model"}[role.role]
                problems[role.role] = (f"{what} {role.name} is missing upstream: run `ollama pull {role.name}` "
                                       f"or set {role.setting} to a model `ollama list` shows")
        return problems

    # --- sentences ---

    def _reason(self, exc: BaseException) -> str:
        """What went wrong, in a few words, with the upstream's URL shown only without credentials."""
        cause: BaseException | None = exc
        while cause is not None:
            code = getattr(cause, "errno", None)
            if isinstance(cause, OSError) and isinstance(code, int) and code > 0 and code in errnos.errorcode:
                text = os.strerror(code)
                return text[:1].lower() + text[1:]
            cause = cause.__cause__
        text = exc.message if isinstance(exc, GraphGateError) else str(exc)
        for prefix in (f"upstream Ollama at {self.upstream.url} is unreachable: ",
                       f"upstream Ollama at {self.upstream.url} timed out: ",
                       f"upstream Ollama at {self.upstream.url} failed: "):
            text = text.removeprefix(prefix)
        text = re.sub(r"^\[Errno -?\d+\] ", "", text.replace(self.upstream.url, self.url))
        return re.sub(r"//[^/@\s]*@", "//", text) or type(exc).__name__

    def _unreachable(self, exc: BaseException) -> str:
        reason = self._reason(exc)
        if isinstance(exc, UpstreamUnavailable):
            return f"upstream Ollama at {self.url} is unreachable ({reason}): start Ollama or set GRAPHGATE_UPSTREAM"
        if isinstance(exc, UpstreamTimeout):
            return (f"upstream Ollama at {self.url} did not answer ({reason}): check that it is running and not "
                    "stuck, or that GRAPHGATE_UPSTREAM names the right host")
        if isinstance(exc, UpstreamStatusError):
            return (f"upstream at {self.url} answered /api/version with HTTP {exc.status} ({reason}): "
                    "check that GRAPHGATE_UPSTREAM names an Ollama server")
        return (f"upstream at {self.url} does not answer like Ollama ({reason}): check that GRAPHGATE_UPSTREAM "
                "names an Ollama server")

    # --- the log: each change once ---

    def _report(self, state: UpstreamState) -> None:
        down = not state.reachable
        if down and self._reported_down is not True:
            log.warning("%s", state.error)
        elif not down and self._reported_down is True:
            log.info("upstream Ollama at %s is reachable again (version %s)", self.url, state.version)
        elif not down and self._reported_down is None:
            chosen = ", ".join(f"{r.role} model {r.name}" for r in state.roles if r.present)
            log.info("upstream Ollama at %s is reachable (version %s)%s", self.url, state.version,
                     f"; {chosen}" if chosen else "")
        self._reported_down = down
        if down:
            return  # what the models are is unknown until it answers again: nothing to say about them
        for key, problem in state.model_problems.items():
            if key not in self._reported_models:
                log.warning("%s", problem)
        for key in self._reported_models.keys() - state.model_problems.keys():
            role = state.role(key)
            if role is not None and role.name:
                log.info("%s model %s is now available upstream", key, role.name)
            else:
                log.info("the models of upstream Ollama at %s can be listed again", self.url)
        self._reported_models = dict(state.model_problems)
