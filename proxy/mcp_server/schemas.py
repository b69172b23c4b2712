"""The MCP tools' inputs and outputs as pydantic models: the SDK publishes their JSON schemas
(``inputSchema`` / ``outputSchema``) and checks every call and every result against them. The
fields mirror what the /rag API answers (proxy/knowledge/query.py ``describe``, the document
routes), keeping only what an agent acts on."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from proxy.core.modes import MODES

Mode = Literal["local", "global", "hybrid", "mix", "naive", "bypass"]  # the retrieval modes (proxy/core/modes.py)
assert get_args(Mode) == MODES, "the tools' modes must follow proxy.core.modes"
# checked by the knowledge service (proxy/core/metadata.py), as for an upload: the same 400s
Metadata = dict[str, Any]

METADATA_HELP = ("Optional metadata: a small JSON object of string keys and string, number or list values, "
                 'such as {"source": "docs", "category": "hardware"}; query filters match on it. '
                 "A new version given none keeps the metadata of the version it replaces.")


# --- query ---

class QueryEntity(BaseModel):
    name: str
    type: str
    description: str
    score: float = Field(description="similarity to the question (the fused rank decides the order)")
    degree: int = Field(description="how many relations the entity has in the whole graph")
    rank: int = Field(description="1 = the most relevant")


class QueryRelation(BaseModel):
    source: str
    target: str
    keywords: list[str]
    description: str
    weight: float
    score: float
    rank: int


class QueryChunk(BaseModel):
    id: str
    content: str = Field(description="the passage's text")
    score: float
    documents: list[str] = Field(description="the names of the documents the passage comes from")


class Reference(BaseModel):
    id: int = Field(description="the number the context cites as [n]")
    document: str = Field(description="the document's name")


class Filtered(BaseModel):
    filters: str = Field(description="the filter as it ran (canonical JSON)")
    documents: int = Field(description="how many documents it let through (0: the context is empty)")


class QueryResult(BaseModel):
    query: str
    mode: str
    context: str = Field(description="the grounding text a chat turn would be given: entities, relations and "
                                     "passages, citing the references by number; empty when nothing matched")
    entities: list[QueryEntity]
    relations: list[QueryRelation]
    chunks: list[QueryChunk]
    references: list[Reference]
    skipped: str | None = Field(description="why no context was retrieved, when none was")
    filtered: Filtered | None = Field(default=None, description="the metadata filter that ran, when one did")
    timings: dict[str, float] = Field(description="milliseconds per retrieval stage")


# --- the graph ---

class Entity(BaseModel):
    name: str
    type: str
    description: str
    degree: int = Field(description="how many relations the entity has")
    sources: int = Field(description="how many passages mention it")
    score: float | None = Field(default=None, description="cosine similarity to the text (by similarity only)")


class Entities(BaseModel):
    entities: list[Entity]


class NeighbourEntity(BaseModel):
    name: str
    type: str
    degree: int


class Relation(BaseModel):
    source: str
    target: str
    keywords: list[str]
    description: str
    weight: float
    direct: bool = Field(description="the relation touches the asked entity itself (one hop)")


class Relations(BaseModel):
    entity: str = Field(description="the entity's name as stored (a merged-away name gives its target)")
    entities: list[NeighbourEntity] = Field(description="the entity and its neighbours within the depth")
    relations: list[Relation] = Field(description="its own relations first, then the heaviest")
    relation_total: int = Field(description="relations among those entities before the limit")
    capped: bool = Field(description="the limit was reached (neighbours or relations): there may be more; ask "
                                     "with fewer hops or a higher limit")


# --- documents ---

class DocumentInput(BaseModel):
    name: str = Field(min_length=1, description="the document's name, with its file extension (notes.md, "
                                                 "manual.pdf); a document of the same name is replaced by it")
    text: str | None = Field(default=None, description="the document's text (plain text, Markdown, HTML)")
    content_base64: str | None = Field(default=None, description="or: the file's bytes in base64 (PDF, DOCX, ...)")
    metadata: Metadata | None = Field(default=None, description=METADATA_HELP)


class Inserted(BaseModel):
    name: str
    outcome: Literal["accepted", "replaced", "duplicate", "updated", "rejected"] = Field(
        description="accepted: new, queued; replaced: a new version of the document of that name, queued "
                    "(the old version stays searchable until it is processed); duplicate: the same text is "
                    "already stored; updated (update only): the document's metadata was replaced, its "
                    "content unchanged; rejected: see error")
    id: str | None = Field(default=None, description="the document id (for update, delete and "
                                                     "graphgate://documents/{id})")
    status: str | None = Field(default=None, description="pending until processed; poll stats or read the "
                                                         "document resource")
    duplicate_of: str | None = Field(default=None, description="the stored document with the same text")
    error: str | None = Field(default=None, description="why it was rejected")


class Batch(BaseModel):
    documents: list[Inserted]


class Deleted(BaseModel):
    document: dict[str, Any] = Field(description="the deleted document's row")
    chunks_removed: int
    entities_removed: int
    entities_updated: int
    relations_removed: int
    relations_updated: int


# --- management ---

class Stats(BaseModel):
    documents: dict[str, int] = Field(description="documents by status")
    chunks: int
    entities: int
    relations: int
    queued: int = Field(description="documents waiting for the pipeline")
    running: int = Field(description="documents being extracted or merged")
    generation: int = Field(description="the knowledge base's version: it moves with every change")
    index_sizes: dict[str, int]
    bytes_on_disk: int


class Rebuilt(BaseModel):
    index_sizes: dict[str, int] = Field(description="vectors per rebuilt index")
