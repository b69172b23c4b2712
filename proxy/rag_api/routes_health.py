"""``GET /rag/health``: whether GraphGate can do its job right now, as JSON, for an operator, a
container health check or a load balancer. ``GET /`` stays Ollama's banner, which clients rely on.

Open without the API key (``middleware.PUBLIC_READS``; CORS still applies): a health
check or a load balancer must be able to call it with no secret, as they call Ollama's ``GET /``.
So it shows nothing secret: the upstream's URL without user, password or query, model names,
counts, sizes and sentences about what is wrong; never a key, a password, a document or the
upstream's whole model list (that stays behind the key on /api/tags).

``?kb=NAME`` (or ``X-GraphGate-KB``) describes that knowledge base's store (default: ``default``;
an unknown name: 404). It never lists the bases' names: ``GET /rag/kbs`` is behind the key.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import ServiceUnavailable
from proxy.core.responses import json_response
from proxy.guards.access import unknown_base
from proxy.guards.middleware import KeyCheck, mark
from proxy.state import access_settings, kb_name, knowledge
from proxy.upstream.watch import FRESH_SECONDS

log = logging.getLogger("graphgate.health")

PATH = "/rag/health"
STORE_SECONDS = 2.0  # a store busier than this (a long checkpoint) is reported as such, not waited for


async def health(request: Request) -> Response:
    """Readiness, with the reasons when something is wrong.

    ``status`` is ``"ok"`` when nothing is wrong, else ``"degraded"``, with ``problems``: one
    sentence each, saying what to do.

    HTTP 503 ("not ready") when GraphGate cannot serve a grounded chat at all and the cause is
    not a model choice: the upstream is unreachable or does not answer as Ollama does, or the
    knowledge store is not open (or cannot be read). HTTP 200 otherwise, degraded included: a
    missing model (embedding, extraction or keyword model), a store that cannot write, a busy
    store, a store whose vectors come from another embedding model than GRAPHGATE_EMBED_MODEL
    (chats stay grounded by that model until `graphgate reindex`; ``embedding`` says which tables).
    A missing model still lets every client chat with the models it names; only ``ollama
    pull`` fixes it, so taking the gateway out of a load balancer or restarting its container
    (what a 503 makes them do) would only add an outage, and on a fresh install it would keep
    the gateway "unhealthy" until the models are pulled. The 503 body is the same report, plus
    ``error`` (the problems in one string), the shape of GraphGate's other errors.

    The upstream part is the background watcher's last check, checked again first when older
    than a few seconds (never more than one check at a time, each bounded by
    GRAPHGATE_DISCOVERY_TIMEOUT), so health requests never hammer the upstream.
    """
    gateway = request.app.state.gateway
    name = kb_name(request)
    kb, kb_error = gateway.knowledge, gateway.knowledge_error
    if name != "default":   # opened if it is not (a lease until the response is sent); unknown: 404
        identify(request)
        try:
            kb, kb_error = await knowledge(request), None
        except ServiceUnavailable as exc:
            kb, kb_error = None, exc.message
    upstream = await gateway.watcher.latest(FRESH_SECONDS)
    store, pipeline, store_problems, store_failed = await _store_report(kb, kb_error, gateway.store_probe)
    problems = [*upstream.problems, *store_problems]
    embedding = kb.embedding.check if kb is not None else None   # the store's models (embedding_guard.py)
    if embedding is not None and (mismatch := embedding.problem(upstream.models)) is not None:
        problems.append(mismatch)
    ready = upstream.reachable and not store_failed
    body: dict[str, Any] = {
        "status": "degraded" if problems else "ok",
        "kb": name,
        "ready": ready,
        "problems": problems,
        "upstream": upstream.describe(),
        "upstreams": gateway.watcher.members(),   # each of GRAPHGATE_UPSTREAM's servers
        "models": {role.role: role.describe() for role in upstream.roles},
        "store": store,
        "pipeline": pipeline,
        "embedding": embedding.describe() if embedding is not None else None,
    }
    if not ready:
        body["error"] = "; ".join(problems)
    return json_response(body, 200 if ready else 503, headers={"cache-control": "no-store"})


def identify(request: Request) -> None:
    """Health is public, but another base than ``default`` is not: once the gateway is guarded (a key
    in use, or a console password), only a key that may read it gets its report, and anyone else the
    404 an unknown base gets, so that names cannot be probed."""
    settings = access_settings(request)
    check = KeyCheck(settings.api_key)
    if not (check.in_use(request.scope) or settings.admin_password):
        return
    who = check.principal(request.scope)
    if who is None:
        raise unknown_base(kb_name(request))
    mark(request.scope, who)


async def _store_report(kb: Any, kb_error: str | None, store_probe: Any
                        ) -> tuple[dict[str, Any], dict[str, Any] | None, list[str], bool]:
    """(store, pipeline, problems, failed) of the knowledge base's service ``kb`` (None: it could not
    be opened, for ``kb_error``)."""
    if kb is None:
        # the class only: the message names paths and process ids, and this endpoint is open (the log has it)
        error = (kb_error or "not opened").split(":", 1)[0] + "; the log says more"
        return ({"open": False, "error": error, "documents": None, "writable": None, "free_bytes": None,
                 "unrecorded_failures": 0}, None,
                [f"the knowledge store is unavailable ({error}): chats go through without your documents; "
                 "check GRAPHGATE_DATA_DIR (free space, permissions, another GraphGate using it), then restart"],
                True)
    server = kb.store.backend.shared   # PostgreSQL (GRAPHGATE_STORE): no data directory to check
    place = "the PostgreSQL server GRAPHGATE_STORE names" if server else "the disk holding GRAPHGATE_DATA_DIR"
    status = kb.documents.status()
    pipeline = {"working": bool(status["queued"] or status["running"]), "queued": len(status["queued"]),
                "running": len(status["running"]), "chunks_per_minute": status["chunks_per_minute"]}
    probe = await kb.documents.probe(STORE_SECONDS, store_probe)
    failure = probe.condition.failure
    # reopened: times DuckDB invalidated the database (a checkpoint on a full disk) and GraphGate
    # opened it again by itself; invalidated: it is unusable right now (no path: this endpoint is open)
    store: dict[str, Any] = {"open": True, "error": None, "documents": None, "writable": None, "free_bytes": None,
                             "unrecorded_failures": probe.unrecorded_failures, "invalidated": failure is not None,
                             "reopened": probe.condition.reopened}
    problems: list[str] = []
    if failure is not None and server:
        store["error"] = "unreachable; the log says more"
        problems.append("the knowledge store's PostgreSQL server could not be reached at the last statement; GraphGate "
                        "reconnects by itself as soon as it answers: until then /rag and the console answer 503")
    elif failure is not None:
        cause = "the disk holding GRAPHGATE_DATA_DIR is full" if "is full" in failure else "the log says more"
        store["error"] = "invalidated; " + cause
        problems.append(f"DuckDB invalidated the knowledge store's database after a fatal error ({cause}); GraphGate "
                        "reopens it by itself as soon as it can (free some space): until then /rag and the "
                        "console answer 507 or 503")
    if probe.busy:
        problems.append(f"the knowledge store did not answer within {STORE_SECONDS:g} s: it is busy (a large "
                        f"commit or checkpoint); if this persists, check {place}")
        return store, pipeline, problems, False
    if probe.error is not None:
        exc = probe.error
        if probe.lost:  # said above
            return store, pipeline, problems, True
        log.error("the knowledge store cannot be read for /rag/health: %s: %s", type(exc).__name__, exc)
        store["error"] = f"{type(exc).__name__}; the log says more"  # the message may name paths
        problems.append(f"the knowledge store cannot be read ({store['error']}): check {place}, then restart")
        return store, pipeline, problems, True
    assert probe.health is not None
    store.update(documents=probe.health.documents, writable=probe.health.writable,
                 free_bytes=probe.health.free_bytes)
    if server:
        store["stored_bytes"] = probe.health.stored_bytes   # the base's schema on the server
    if not probe.health.writable:
        problems.append("the knowledge store's PostgreSQL server refuses writes (read-only, a full disk or a "
                        "revoked grant), so uploads and ingestion fail" if server else
                        "the knowledge store's data directory is not writable, so uploads and ingestion fail: "
                        "give GraphGate write access to GRAPHGATE_DATA_DIR")
    if probe.unrecorded_failures:
        problems.append(f"the knowledge store refused to record {probe.unrecorded_failures} failed document(s) "
                        "(is the disk full?): free some space, then retry them")
    return store, pipeline, problems, False


ROUTES = [Route(PATH, health, methods=["GET"])]
