"""The knowledge base as MCP tools and resources (seed 004's ``knowledge.*``): one ``MCPServer``
whose tools call the knowledge service exactly as the /rag routes do, so validation, limits and
errors are the same. A GraphGateError becomes a tool error (``isError``) carrying its message;
arguments that do not fit a tool's input schema are refused by the SDK's own validation."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resources import ResourceSecurity
from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from proxy.control.principals import Role
from proxy.core.errors import BadRequest, GraphGateError, NotFound
from proxy.core.settings import SETTINGS, Settings
from proxy.guards.access import require, require_unrestricted
from proxy.knowledge import lookup
from proxy.knowledge.bases import DEFAULT as DEFAULT_BASE
from proxy.knowledge.intake import add_document
from proxy.knowledge.reindex import rebuild_live
from proxy.knowledge.service import Knowledge
from proxy.mcp_server.schemas import (
    METADATA_HELP,
    Batch,
    Deleted,
    DocumentInput,
    Entities,
    Entity,
    Inserted,
    Metadata,
    Mode,
    QueryResult,
    Rebuilt,
    Relations,
    Stats,
)

if TYPE_CHECKING:
    from proxy.knowledge.bases import KnowledgeBases

KnowledgeSource = Callable[[], Knowledge]   # the service, or a GraphGateError saying why there is none
KbName = Annotated[str, Field(min_length=1, max_length=64, description=(
    "the knowledge base to work on (GET /rag/kbs lists them; default: default)"))]


@dataclass(frozen=True)
class Served:
    """What a server's tools work on: its lifespan state, found by each call in its context."""
    knowledge: KnowledgeSource                               # the default base's service
    settings: Settings
    bases: Callable[[], KnowledgeBases | None] = lambda: None   # the gateway's other bases, when it has them


def caller(ctx: Context) -> Any:
    """The HTTP request's scope, where the gateway's key check put the caller's principal (an
    empty one over stdio: the local user, an unrestricted admin, as access.principal says)."""
    request = ctx.request_context.request
    return getattr(request, "scope", None) or {}


@asynccontextmanager
async def knowledge_of(ctx: Context, kb: str, action: Role) -> AsyncIterator[Knowledge]:
    """The service of the base ``kb``, held open (a lease) for the block, when the caller's key may
    do ``action`` on it (a base it may not see is an error worded as for an unknown one)."""
    require(caller(ctx), kb, action)
    state = served(ctx)
    if kb == DEFAULT_BASE:
        yield state.knowledge()
        return
    registry = state.bases()
    if registry is None:
        raise NotFound(f"no knowledge base named {kb!r} here: bases other than {DEFAULT_BASE} are served "
                       "by a running gateway (graphgate serve)")
    async with registry.lease(kb) as knowledge:
        yield knowledge


def served(ctx: Context) -> Served:
    state = ctx.request_context.lifespan_context
    assert isinstance(state, Served)
    return state


TOP_K = next(s.knob for s in SETTINGS if s.name == "top_k")
assert TOP_K is not None
MAX_TOTAL_TOKENS = next(s.knob for s in SETTINGS if s.name == "max_total_tokens")
assert MAX_TOTAL_TOKENS is not None
MAX_BATCH = 100       # documents per batch_insert, as per multipart upload (proxy/actions/uploads.py MAX_FILES)
MAX_ENTITIES = 100
MAX_RELATIONS = 500

INSTRUCTIONS = """GraphGate's knowledge base: documents turned into a knowledge graph (entities, relations)
and searchable passages. Start with `query` for a question (it returns the grounding context with numbered
references); use `get_entities` and `get_relations` to explore the graph; `insert`, `batch_insert`, `update`
and `delete` change the documents (ingestion runs in the background: a new document is searchable once
`stats` or the document resource says it is processed). Every tool takes `kb`, the knowledge base to work
on (default: default). Resources: graphgate://documents/{id} and graphgate://entities/{name} (default), and
graphgate://{kb}/documents/{id} and graphgate://{kb}/entities/{name} for any base."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
ADDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
REPLACES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                           open_world_hint=False)


@contextmanager
def tool_errors() -> Iterator[None]:
    """GraphGate's errors as tool errors the agent reads (the /rag API's 4xx and 5xx messages)."""
    try:
        yield
    except GraphGateError as exc:
        raise ToolError(exc.message) from exc


@contextmanager
def resource_errors() -> Iterator[None]:
    try:
        yield
    except NotFound as exc:
        raise ResourceNotFoundError(exc.message) from exc
    except GraphGateError as exc:
        raise ResourceError(exc.message) from exc


def document_bytes(text: str | None, content_base64: str | None) -> bytes:
    """The document's bytes from exactly one of its text and its base64 content."""
    if (text is None) == (content_base64 is None):
        raise BadRequest("give the document as either text or content_base64 (one of them)")
    if text is not None:
        return text.encode()
    try:
        return base64.b64decode(content_base64 or "", validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("content_base64 is not valid base64") from None


async def query(
        ctx: Context,
        question: Annotated[str, Field(min_length=1, description="the question, in natural language")],
        mode: Annotated[Mode | None, Field(description=(
            "retrieval mode: mix (default: graph and passages), hybrid (entities and relations), local "
            "(entities named in the question and their relations), global (themes across documents), naive "
            "(passages only), bypass (nothing)"))] = None,
        top_k: Annotated[int | None, Field(ge=int(TOP_K.low), le=int(TOP_K.high), description=(
            "entities and relations taken from the vector search (default: the gateway's setting)"))] = None,
        filters: Annotated[dict[str, Any] | None, Field(description=(
            'restrict the search to documents whose metadata matches, e.g. {"category": "hr"}, '
            '{"year": {"$gte": 2020}}, {"$document": "handbook.pdf"}; a filter that matches nothing gives '
            "an empty context"))] = None,
        max_total_tokens: Annotated[int | None, Field(
            ge=int(MAX_TOTAL_TOKENS.low), le=int(MAX_TOTAL_TOKENS.high), description=(
                "the most tokens the context may take, all of it (instructions, facts, passages, references); "
                "default: the gateway's setting"))] = None,
        kb: KbName = DEFAULT_BASE) -> QueryResult:
    """Search the knowledge base for a question and return the grounding context a chat turn would get:
    the relevant entities, relations and passages, and the documents they come from as numbered
    references ([n] in the context). Use it before answering a question about the user's documents."""
    body: dict[str, Any] = {"query": question, "mode": mode, "top_k": top_k, "filters": filters,
                            "max_total_tokens": max_total_tokens}
    with tool_errors():
        async with knowledge_of(ctx, kb, "read") as knowledge:
            outcome = await knowledge.query({k: v for k, v in body.items() if v is not None}, api="mcp")
    return QueryResult.model_validate(outcome.result)


async def get_entities(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="a name, or part of one (by name); or any text "
                                                              "(by similarity)")],
        by: Annotated[Literal["name", "similarity"], Field(description=(
            "name: entities whose name contains the text, best connected first; similarity: entities whose "
            "name and description mean nearest to the text, nearest first"))] = "name",
        type: Annotated[str | None, Field(description="only entities of this type (Person, Organization, "
                                                      "...)")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_ENTITIES, description="at most this many")] = 10,
        kb: KbName = DEFAULT_BASE) -> Entities:
    """Find entities of the knowledge graph by name or by meaning, optionally of one type. Each comes with
    its description, its number of relations and how many passages mention it."""
    with tool_errors():
        search = lookup.entities_by_name if by == "name" else lookup.entities_by_similarity
        async with knowledge_of(ctx, kb, "read") as knowledge:
            found = await search(knowledge, query, type or "", limit)
    return Entities(entities=[Entity(name=e.name, type=e.type, description=e.description, degree=e.degree,
                                     sources=e.sources, score=e.score) for e in found])


async def get_relations(
        ctx: Context,
        entity: Annotated[str, Field(min_length=1, description="the entity's name (case-insensitive)")],
        depth: Annotated[int, Field(ge=1, le=3, description="hops from the entity: 1 = its own relations, "
                                                            "2 = also its neighbours' relations, ...")] = 1,
        limit: Annotated[int, Field(ge=1, le=MAX_RELATIONS, description=(
            "at most this many relations, and this many neighbours (best connected first)"))] = 50,
        kb: KbName = DEFAULT_BASE) -> Relations:
    """The relations of an entity and, with depth 2 or 3, of its neighbours: who or what it is connected to
    and how (keywords, description, weight). An unknown entity is an error naming it."""
    with tool_errors():
        async with knowledge_of(ctx, kb, "read") as knowledge:
            found = await lookup.neighbourhood(knowledge, entity, depth, limit)
    return Relations.model_validate(found, from_attributes=True)


async def _insert(ctx: Context, knowledge: Knowledge, item: DocumentInput) -> Inserted:
    data = document_bytes(item.text, item.content_base64)
    return Inserted.model_validate(await add_document(knowledge, served(ctx).settings, item.name, data,
                                                      item.metadata))


async def insert(
        ctx: Context,
        name: Annotated[str, Field(min_length=1, description=(
            "the document's name with its file extension (notes.md, manual.pdf); inserting a name that is "
            "already stored makes this the new version of that document"))],
        text: Annotated[str | None, Field(description="the document's text (plain text, Markdown, HTML)")] = None,
        content_base64: Annotated[str | None, Field(description=(
            "or: the file's bytes in base64 (PDF, DOCX, ...)"))] = None,
        metadata: Annotated[Metadata | None, Field(description=METADATA_HELP)] = None,
        kb: KbName = DEFAULT_BASE) -> Inserted:
    """Add one document to the knowledge base, given as text or as a file's bytes (base64). It is parsed
    at once (an unreadable file is an error) and ingested in the background: its entities, relations and
    passages become searchable when its status is processed."""
    with tool_errors():
        async with knowledge_of(ctx, kb, "write") as knowledge:
            return await _insert(ctx, knowledge, DocumentInput(name=name, text=text, content_base64=content_base64,
                                                               metadata=metadata))


async def batch_insert(
        ctx: Context,
        documents: Annotated[list[DocumentInput], Field(min_length=1, max_length=MAX_BATCH, description=(
            "the documents, each with a name and either text or content_base64, and optional metadata"))],
        kb: KbName = DEFAULT_BASE) -> Batch:
    """Add several documents at once (as insert does for one). Each gets its own outcome: a document that
    cannot be taken is reported as rejected with the reason, and the others still go in. Only when every
    one is rejected is the call an error."""
    results = []
    with tool_errors():
        async with knowledge_of(ctx, kb, "write") as knowledge:
            for item in documents:
                try:
                    results.append(await _insert(ctx, knowledge, item))
                except GraphGateError as exc:
                    results.append(Inserted(name=item.name, outcome="rejected", error=exc.message))
    if all(r.outcome == "rejected" for r in results):
        raise ToolError("; ".join(f"{r.name}: {r.error}" for r in results))
    return Batch(documents=results)


async def update(
        ctx: Context,
        document_id: Annotated[str, Field(min_length=1, description="the id of the stored document (from "
                                                                    "insert, or a document resource)")],
        text: Annotated[str | None, Field(description="the new version's text")] = None,
        content_base64: Annotated[str | None, Field(description="or: the new version's file bytes, "
                                                                "base64")] = None,
        metadata: Annotated[Metadata | None, Field(description=METADATA_HELP)] = None,
        kb: KbName = DEFAULT_BASE) -> Inserted:
    """Replace a document with a new version of its content (same name), or only its metadata (give
    metadata and no content). The old version stays searchable until the new one is processed, then
    its passages and what only it said leave the graph. The same content again is a duplicate: its
    content is unchanged, and metadata given with it replaces the document's."""
    with tool_errors():
        async with knowledge_of(ctx, kb, "write") as knowledge:
            document = await knowledge.documents.get(document_id)
            if text is None and content_base64 is None and metadata is not None:
                row = await knowledge.documents.set_metadata(document_id, metadata)
                return Inserted(name=row["name"], outcome="updated", id=row["id"], status=row["status"])
            result = await _insert(ctx, knowledge, DocumentInput(name=document["name"], text=text,
                                                                 content_base64=content_base64, metadata=metadata))
            if result.outcome == "duplicate" and metadata is not None and result.id == document_id:
                await knowledge.documents.set_metadata(result.id, metadata)
                result.outcome = "updated"
            return result


async def delete(
        ctx: Context,
        document_id: Annotated[str, Field(min_length=1, description="the id of the document to delete")],
        kb: KbName = DEFAULT_BASE) -> Deleted:
    """Delete a document: its passages go, and so do the entities and relations only it mentioned; the
    others are rebuilt from their remaining sources. Cannot be undone."""
    with tool_errors():
        async with knowledge_of(ctx, kb, "write") as knowledge:
            return Deleted.model_validate(await knowledge.documents.delete(document_id))


async def stats(ctx: Context, kb: KbName = DEFAULT_BASE) -> Stats:
    """How big the knowledge base is and what the ingestion pipeline is doing: documents by status
    (pending, processing, processed, failed), passages, entities, relations, queued and running work."""
    with tool_errors():
        async with knowledge_of(ctx, kb, "read") as knowledge:
            counts = await knowledge.documents.stats()
            pipeline = knowledge.documents.status()
    return Stats(documents=counts["documents"], chunks=counts["chunks"], entities=counts["entities"],
                 relations=counts["relations"], queued=len(pipeline["queued"]),
                 running=len(pipeline["running"]), generation=counts["generation"],
                 index_sizes=counts["index_sizes"], bytes_on_disk=counts["bytes_on_disk"])


async def rebuild_index(ctx: Context, kb: KbName = DEFAULT_BASE) -> Rebuilt:
    """Rebuild the vector indexes and the graph of the knowledge base from its stored tables (after a
    crash left them out of step, or to compact them). Searches wait while it runs; send a progress
    token to follow it."""
    send, receive = anyio.create_memory_object_stream[str](math.inf)
    steps = 0

    async def forward() -> None:
        nonlocal steps
        async with receive:
            async for message in receive:
                steps += 1
                await ctx.report_progress(steps, message=message)

    def report(what: str, done: int, total: int) -> None:
        send.send_nowait(f"{what}: {done}/{total}")

    with tool_errors():
        require_unrestricted(caller(ctx), "rebuild_index")
    failure: GraphGateError | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(forward)
        with send:
            try:   # caught inside the group: leaving it, an error would come out wrapped in a group
                async with knowledge_of(ctx, kb, "admin") as knowledge:
                    sizes = await rebuild_live(knowledge, served(ctx).settings, report)
            except GraphGateError as exc:
                failure = exc
    if failure is not None:
        raise ToolError(failure.message) from failure
    return Rebuilt(index_sizes=sizes)


# --- resources ---

async def document(ctx: Context, document_id: str) -> str:
    return await base_document(ctx, DEFAULT_BASE, document_id)


async def entity(ctx: Context, name: str) -> str:
    return await base_entity(ctx, DEFAULT_BASE, name)


async def base_document(ctx: Context, kb: str, document_id: str) -> str:
    with resource_errors():
        async with knowledge_of(ctx, kb, "read") as knowledge:
            found = await lookup.document_with_text(knowledge, document_id)
    return json.dumps(found, ensure_ascii=False, default=str)


async def base_entity(ctx: Context, kb: str, name: str) -> str:
    with resource_errors():
        async with knowledge_of(ctx, kb, "read") as knowledge:
            key = await lookup.resolve_entity(knowledge, name)
            found = await knowledge.graph.entity(key)
            around = await lookup.neighbourhood(knowledge, key, 1, MAX_RELATIONS)
    found["relations"] = around.relations
    return json.dumps(found, ensure_ascii=False)


def _version() -> str:
    try:
        return version("graphgate")
    except PackageNotFoundError:
        return ""


@functools.cache
def tool_set() -> tuple[Tool, ...]:
    """The tools, made once per process (their schemas and validators take ~25 ms to build) and
    shared by every server: each call finds its knowledge service in its server's ``Served``."""
    return tuple(Tool.from_function(fn, annotations=hints, structured_output=True) for fn, hints in (
        (query, READ_ONLY), (get_entities, READ_ONLY), (get_relations, READ_ONLY), (insert, ADDS),
        (batch_insert, ADDS), (update, REPLACES), (delete, REPLACES), (stats, READ_ONLY), (rebuild_index, ADDS)))


def build_server(knowledge: KnowledgeSource, settings: Settings,
                 bases: Callable[[], KnowledgeBases | None] = lambda: None) -> MCPServer[Served]:
    """The MCP server over ``knowledge`` (called per request: the gateway's service can be absent)
    and, on a gateway, its other knowledge bases (``bases``)."""
    state = Served(knowledge, settings, bases)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Served]) -> AsyncIterator[Served]:
        yield state

    server: MCPServer[Served] = MCPServer("graphgate", title="GraphGate knowledge base", instructions=INSTRUCTIONS,
                                          version=_version(), log_level="WARNING", tools=list(tool_set()),
                                          lifespan=lifespan)
    server.resource("graphgate://documents/{document_id}", name="document", mime_type="application/json",
                    description="A document: its status, metadata, counts of passages, entities and relations, "
                                "and its text")(document)
    server.resource("graphgate://entities/{name}", name="entity", mime_type="application/json",
                    description="An entity of the graph: type, description, sources, degree and its relations "
                                "(the name URL-encoded)",
                    security=ResourceSecurity(exempt_params=frozenset({"name"})))(entity)
    server.resource("graphgate://{kb}/documents/{document_id}", name="base_document", mime_type="application/json",
                    description="A document of the knowledge base kb (as graphgate://documents/{id} for default)"
                    )(base_document)
    server.resource("graphgate://{kb}/entities/{name}", name="base_entity", mime_type="application/json",
                    description="An entity of the knowledge base kb's graph (as graphgate://entities/{name} for "
                                "default; the name URL-encoded)",
                    security=ResourceSecurity(exempt_params=frozenset({"name"})))(base_entity)
    return server
