"""GraphGate's settings: one declared table, read once at start-up.

Each row of ``SETTINGS`` names a setting, its environment variable, its default, a parser
and a line of help. ``Settings.load()`` reads the environment, lets command-line values
override it and fails with a ``SettingsError`` naming the variable and the bad value.
docs/configuration.md documents every row, generated from it (``tests/test_settings.py`` checks that it is).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.core.data_dir import default_data_dir, user_data_dir
from proxy.core.hosts import parse_allowed_hosts
from proxy.core.language_setting import parse_language
from proxy.core.modes import MODES
from proxy.core.setting_parsers import (  # noqa: F401 - re-exported: parsers are part of the settings API
    choice,
    int_between,
    parse_bool,
    parse_db_memory,
    parse_fraction,
    parse_log_level,
    parse_names,
    parse_optional_path,
    parse_optional_str,
    parse_optional_url,
    parse_origins,
    parse_path,
    parse_plain_model_kb,
    parse_port,
    parse_positive_float,
    parse_positive_int,
    parse_size,
    parse_store,
    parse_url,
    parse_url_list,
)
from proxy.core.trusted_proxies import parse_trusted_proxies


class SettingsError(ValueError):
    """A setting has a value GraphGate cannot use; the message names the variable."""


DEFAULT_ORIGINS = ",".join(
    f"{scheme}://{host}{port}"
    for host in ("localhost", "127.0.0.1", "0.0.0.0")
    for scheme in ("http", "https")
    for port in ("", ":*")
) + ",app://*,file://*,tauri://*,vscode-webview://*,chrome-extension://*,moz-extension://*,safari-web-extension://*"


@dataclass(frozen=True)
class Knob:
    """A setting a query may override, and its parser: a whole number or a number within
    ``low``..``high``, or one of ``choices``. QueryParams, the /rag/query checks and the playground's
    form are made from the rows that have one."""
    kind: type                         # int, float or str
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()

    def __call__(self, raw: str) -> Any:
        if self.choices:
            return choice(*self.choices)(raw)
        if self.kind is int:
            return int_between(int(self.low), int(self.high))(raw)
        value = float(raw)
        if not self.low <= value <= self.high:
            raise ValueError(f"expected a number from {self.low:g} to {self.high:g}")
        return value


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    parse: Callable[[str], Any]
    help: str
    secret: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def knob(self) -> Knob | None:
        """How a query may override the setting; None for a setting that only the start-up sets."""
        return self.parse if isinstance(self.parse, Knob) else None


SETTINGS: tuple[Setting, ...] = (
    Setting("upstream", "GRAPHGATE_UPSTREAM", "http://127.0.0.1:11434", parse_url_list,
            "URL of the upstream Ollama server that GraphGate forwards to; several, separated by commas: each "
            "chat goes to the least busy one that has its model, GraphGate's own model calls are spread "
            "over them, and one that cannot be reached is skipped until it answers again."),
    Setting("host", "GRAPHGATE_HOST", "127.0.0.1", str,
            "Address to listen on. Binding elsewhere than loopback without a key or password logs a warning."),
    Setting("port", "GRAPHGATE_PORT", "11435", parse_port, "TCP port to listen on."),
    Setting("data_dir", "GRAPHGATE_DATA_DIR", "", parse_optional_path,
            "Directory holding the knowledge store (DuckDB database, vector indexes). Unset: the user's data "
            "directory (`~/.local/share/graphgate` on Linux, `~/Library/Application Support/graphgate` on "
            "macOS, `%LOCALAPPDATA%\\graphgate` on Windows), the same for the server and every CLI command; a "
            "`./graphgate-data` store left by an earlier version in the current directory is used, with a "
            "warning, until it is moved."),
    Setting("store", "GRAPHGATE_STORE", "embedded", parse_store,
            "Where the knowledge is kept. `embedded`: DuckDB, USearch and igraph in the data directory, the "
            "fastest on one machine. `postgresql://user:password@host:5432/db`: tables and pgvector indexes in "
            "PostgreSQL (with the pgvector extension; install `graphgate[postgresql]`), each knowledge base a "
            "schema, shared by several GraphGate replicas; the graph stays in each replica's memory. See "
            "docs/postgresql.md.", secret=True),
    Setting("allowed_hosts", "GRAPHGATE_ALLOWED_HOSTS", "", parse_allowed_hosts,
            "More host names (comma-separated, any port; `*.example.com` for a domain, `*` for any) a request's "
            "Host header may name, besides IP literals and localhost. Checked on a loopback bind (against DNS "
            "rebinding) and, when set, on any bind."),
    Setting("trusted_proxies", "GRAPHGATE_TRUSTED_PROXIES", "", parse_trusted_proxies,
            "Addresses or networks (comma-separated, `*` for any) of reverse proxies in front of GraphGate whose "
            "`X-Forwarded-For` and `X-Forwarded-Proto` headers are believed. Unset: none, the client is the "
            "connection's peer (otherwise a local process could claim any address, past the console's "
            "per-address login limit)."),
    Setting("api_key", "GRAPHGATE_API_KEY", "", parse_optional_str,
            "When set, every /api/* and /v1/* request needs `Authorization: Bearer <key>`.", secret=True),
    Setting("metrics_require_key", "GRAPHGATE_METRICS_REQUIRE_KEY", "false", parse_bool,
            "Make GET /metrics (Prometheus) need the API key too (it does anyway once a key limited to some "
            "knowledge bases exists: its labels name every base). Off by default: a scrape job usually sends "
            "no credentials, and the metrics hold counts and latencies, never documents or questions."),
    Setting("max_body_bytes", "GRAPHGATE_MAX_BODY_BYTES", "64MiB", parse_size,
            "Largest request body accepted on JSON endpoints (blob uploads are streamed and exempt)."),
    Setting("connect_timeout", "GRAPHGATE_CONNECT_TIMEOUT", "10", parse_positive_float,
            "Seconds to wait for a connection to the upstream."),
    Setting("read_timeout", "GRAPHGATE_READ_TIMEOUT", "600", parse_positive_float,
            "Seconds the upstream may stay silent before a request fails with 504 (between bytes; "
            "streams have no total time limit, so long answers are never cut)."),
    Setting("discovery_timeout", "GRAPHGATE_DISCOVERY_TIMEOUT", "5", parse_positive_float,
            "Seconds allowed for /api/version, /api/tags, /api/ps and /api/show; on timeout /api/tags "
            "answers from its last good copy."),
    Setting("cors_origins", "GRAPHGATE_CORS_ORIGINS", DEFAULT_ORIGINS, parse_origins,
            "Comma-separated browser origins allowed to call the API (`*` wildcards allowed, `*` alone "
            "allows all). The default is Ollama's: localhost pages on any port and app/extension schemes."),
    Setting("shutdown_grace", "GRAPHGATE_SHUTDOWN_GRACE", "5", parse_positive_float,
            "Seconds open requests (a streaming chat) get to finish after SIGTERM before they are cut; "
            "ingestion is then checkpointed, so a stop stays well within 10 s."),
    Setting("log_level", "GRAPHGATE_LOG_LEVEL", "info", parse_log_level,
            "Logging level: debug, info, warning, error or critical."),
    # --- knowledge store and ingestion ---
    Setting("llm_model", "GRAPHGATE_LLM_MODEL", "", parse_optional_str,
            "Upstream chat model for extraction and summaries; unset: the first model the upstream "
            "lists with the `completion` capability."),
    Setting("embed_model", "GRAPHGATE_EMBED_MODEL", "nomic-embed-text", str,
            "Upstream embedding model. Changing it needs `graphgate reindex`, which re-embeds everything with it "
            "(resumable); until then new documents wait (pending) and questions are embedded by the model the "
            "stored vectors come from."),
    Setting("embed_batch", "GRAPHGATE_EMBED_BATCH", "32", int_between(1, 1024),
            "Texts per upstream /api/embed call."),
    Setting("chunk_tokens", "GRAPHGATE_CHUNK_TOKENS", "1200", int_between(64, 32768),
            "Chunk size in tokens (tiktoken cl100k_base)."),
    Setting("chunk_overlap", "GRAPHGATE_CHUNK_OVERLAP", "100", int_between(0, 4096),
            "Tokens of the previous chunk repeated at the start of the next."),
    Setting("entity_types", "GRAPHGATE_ENTITY_TYPES",
            "Person,Creature,Organization,Location,Event,Concept,Method,Content,Data,Artifact,NaturalObject",
            parse_names, "Comma-separated entity types the extraction asks for (others become `Other`)."),
    Setting("language", "GRAPHGATE_LANGUAGE", "auto", parse_language,
            "Language of extracted descriptions and summaries, and of the instructions and headings around a "
            "chat turn's context. `auto`: each text's own (a chunk is extracted in the language it is written "
            "in, a description summarised in its notes' language, a context worded in the question's); a "
            "language's name (`English`, `Chinese`, ...) makes them all use it (a context is worded in English for a "
            "language its wording table has no entry for)."),
    Setting("gleaning", "GRAPHGATE_GLEANING", "1", int_between(0, 3),
            "Extra extraction passes per chunk that ask only for what was missed (0-3)."),
    Setting("entity_resolution", "GRAPHGATE_ENTITY_RESOLUTION", "true", parse_bool,
            "Fold the names of one thing into one entity as documents are merged: spellings that differ only in "
            "case, spacing, punctuation, articles or legal forms (\"The Kravon Ltd\" / \"Kravon\"), and a short "
            "form a text introduces (\"Kravon Dynamics (KVD)\", \"KVD, short for Kravon Dynamics\"). Each "
            "alias keeps its evidence; the console's entity page shows it and can undo it."),
    Setting("summary_fragments", "GRAPHGATE_SUMMARY_FRAGMENTS", "8", int_between(2, 1000),
            "An entity or relation description is summarised by the LLM once it has this many fragments..."),
    Setting("summary_tokens", "GRAPHGATE_SUMMARY_TOKENS", "1200", int_between(100, 100000),
            "...or once its joined fragments exceed this many tokens."),
    Setting("community_summaries", "GRAPHGATE_COMMUNITY_SUMMARIES", "false", parse_bool,
            "Summarise the graph's communities (Leiden) with the extraction model when the pipeline is idle, "
            "for global questions (GRAPHGATE_COMMUNITIES=on searches them); only communities whose members "
            "changed are summarised again. Off by default while GRAPHGATE_COMMUNITIES is."),
    Setting("embed_concurrency", "GRAPHGATE_EMBED_CONCURRENCY", "4", int_between(1, 64),
            "Embedding calls GraphGate sends the upstream at once (their own limit: the embedding model "
            "runs beside the chat model, so its quick calls never queue behind generations)."),
    Setting("llm_concurrency", "GRAPHGATE_LLM_CONCURRENCY", "2", int_between(1, 64),
            "GraphGate's own chat-model calls at once (extraction, summaries, keywords); chat-time calls "
            "get the next free slot first, but while both wait, ingestion gets every other slot."),
    Setting("ingest_lease_seconds", "GRAPHGATE_INGEST_LEASE_SECONDS", "30", parse_positive_float,
            "With `GRAPHGATE_STORE` on PostgreSQL: how long a replica's claim on a document it ingests lasts "
            "without renewal (renewed every third of it). A replica that dies leaves its documents to the "
            "others after this long; its extracted chunks are not extracted again."),
    Setting("parallel_documents", "GRAPHGATE_PARALLEL_DOCUMENTS", "4", int_between(1, 64),
            "Documents processed at once (their chunks share the LLM slots)."),
    Setting("llm_retries", "GRAPHGATE_LLM_RETRIES", "3", int_between(1, 10),
            "Tries for an upstream call that fails transiently (connection error, 5xx, timeout)."),
    Setting("max_upload_bytes", "GRAPHGATE_MAX_UPLOAD_BYTES", "50MB", parse_size,
            "Largest document accepted for ingestion."),
    Setting("parse_seconds", "GRAPHGATE_PARSE_SECONDS", "120", parse_positive_float,
            "Seconds one document may take to parse (in a worker process); a document taking longer is refused "
            "with 413. The text extracted from a document may be at most GRAPHGATE_MAX_UPLOAD_BYTES characters."),
    Setting("parse_memory", "GRAPHGATE_PARSE_MEMORY", "1GiB", parse_size,
            "Memory one document may take to parse, beyond the parse worker's own; a document needing more is "
            "refused with 413 and the worker replaced, so the gateway's memory stays where it was."),
    Setting("inbox_dir", "GRAPHGATE_INBOX_DIR", "", parse_optional_path,
            "Optional folder watched for new files, which are ingested automatically."),
    Setting("index_save_seconds", "GRAPHGATE_INDEX_SAVE_SECONDS", "30", parse_positive_float,
            "How often changed vector indexes are saved (they are also saved at shutdown and healed "
            "from the database after a crash)."),
    Setting("kb_idle_seconds", "GRAPHGATE_KB_IDLE_SECONDS", "300", parse_positive_float,
            "A knowledge base other than default that no request has used for this long is closed (its "
            "memory freed); the next request opens it again (docs/knowledge-bases.md)."),
    Setting("vector_dtype", "GRAPHGATE_VECTOR_DTYPE", "i8", choice("f32", "f16", "i8"),
            "Element type of the vector indexes. i8 (768 bytes a 768-d vector, scaled per vector so that "
            "no resolution is wasted) keeps 1M chunks within 4 GB at top-10 recall 0.98-0.99; f16 "
            "doubles the memory for 0.998+, f32 doubles it again (bench/index_recall.py). Changing it "
            "rebuilds the indexes at start-up."),
    Setting("db_memory", "GRAPHGATE_DB_MEMORY", "1GB", parse_db_memory,
            "Memory DuckDB may use for its caches (DuckDB's own default is 80 % of the machine's memory)."),
    # --- retrieval and chat augmentation (LightRAG's defaults) ---
    # a Knob parses the setting and bounds the per-query override (/rag/query, the console's playground)
    Setting("mode", "GRAPHGATE_MODE", "mix", Knob(str, choices=MODES),
            "Default retrieval mode: local, global, hybrid, mix, naive or bypass."),
    Setting("top_k", "GRAPHGATE_TOP_K", "40", Knob(int, 1, 1000), "Entities / relations taken from the vector search."),
    Setting("chunk_top_k", "GRAPHGATE_CHUNK_TOP_K", "20", Knob(int, 1, 1000), "Text chunks kept in the context."),
    Setting("max_entity_tokens", "GRAPHGATE_MAX_ENTITY_TOKENS", "6000", Knob(int, 0, 1_000_000),
            "Token ceiling of the entities section; scaled down with the total (the entities and relations "
            "sections together take at most half of it)."),
    Setting("max_relation_tokens", "GRAPHGATE_MAX_RELATION_TOKENS", "8000", Knob(int, 0, 1_000_000),
            "Token ceiling of the relations section; scaled down with the total (the entities and relations "
            "sections together take at most half of it)."),
    Setting("max_total_tokens", "GRAPHGATE_MAX_TOTAL_TOKENS", "30000", Knob(int, 100, 10_000_000),
            "Token ceiling of the whole injected context (instructions, sections and references)."),
    Setting("cosine_threshold", "GRAPHGATE_COSINE_THRESHOLD", "0.2", Knob(float, 0, 1),
            "Minimum cosine similarity of a vector match."),
    Setting("related_chunks", "GRAPHGATE_RELATED_CHUNKS", "5", Knob(int, 1, 100),
            "Chunks taken per entity or relation from its sources."),
    Setting("chunk_selection", "GRAPHGATE_CHUNK_SELECTION", "vector", Knob(str, choices=("vector", "weight")),
            "How an entity's source chunks are picked: by similarity to the query, or by weighted polling."),
    Setting("keywords", "GRAPHGATE_KEYWORDS", "llm", Knob(str, choices=("llm", "off")),
            "`llm`: one model call per turn extracts keywords; `off`: search with the question's embedding alone."),
    Setting("fusion", "GRAPHGATE_FUSION", "roundrobin", Knob(str, choices=("roundrobin", "rrf")),
            "How the channels' lists are merged: `roundrobin` (each list's first, then each list's second...) or "
            "`rrf` (reciprocal rank fusion, k = 60: items found by several channels rise)."),
    Setting("linking", "GRAPHGATE_LINKING", "on", Knob(str, choices=("on", "off")),
            "`on`: the entities a question (or a recent user turn) names, by their names or merge aliases, "
            "seed retrieval in every graph mode without the model (case, punctuation, legal suffixes and "
            "one typo in a long name do not matter); a question naming none gets, in local, hybrid and mix, "
            "the entities its words describe (the entities' BM25 index, built on the first such question)."),
    Setting("expansion", "GRAPHGATE_EXPANSION", "ppr", Knob(str, choices=("off", "ppr", "chains")),
            "`ppr`: local, hybrid and mix also rank the entities up to two hops from the question's linked and "
            "retrieved entities by personalised PageRank (edges weighted by their relevance to the question) and "
            "add the best with the relations joining them, so a bridge entity's own facts come along. "
            "`chains`: only the strongest chains from those entities are followed, a hop at a time (up to four), "
            "each end's relations judged by what the path there left unanswered: the light path's expansion."),
    Setting("relation_ranking", "GRAPHGATE_RELATION_RANKING", "question", Knob(str, choices=("degree", "question")),
            "How a linked or expanded entity's relations are chosen: `degree` (most central first) or "
            "`question` (those whose keywords and description match the question first, so a hub's "
            "asked-for kind of relation leads)."),
    Setting("keyword_search", "GRAPHGATE_KEYWORD_SEARCH", "off", Knob(str, choices=("on", "off")),
            "`on`: mix and naive also search the chunks' words (BM25), and local, global and hybrid the "
            "entities' and relations' names and descriptions, so names, codes and identifiers that "
            "embeddings miss are found (each table's index is built on its first use, then kept in step)."),
    Setting("context_layout", "GRAPHGATE_CONTEXT_LAYOUT", "evidence", Knob(str, choices=("sections", "evidence")),
            "How the context spends its budget: `sections` (entities, relations and passages each up to its own "
            "ceiling) or `evidence` (the facts that answer the question first, long passages with what is left)."),
    Setting("communities", "GRAPHGATE_COMMUNITIES", "off", Knob(str, choices=("on", "off")),
            "`on`: global, hybrid and mix also search the community summaries (see GRAPHGATE_COMMUNITY_SUMMARIES)."),
    Setting("keyword_model", "GRAPHGATE_KEYWORD_MODEL", "", parse_optional_str,
            "A separate (smaller) model for keyword extraction; unset: the extraction model."),
    Setting("keyword_budget", "GRAPHGATE_KEYWORD_BUDGET", "0.025", Knob(float, 0, 60),
            "Seconds, from the start of a turn's retrieval, it waits for its keyword call: the searches that need "
            "no keywords (entity linking, expansion, the question's own vector) run meanwhile; a call not back "
            "by then is not waited for (the turn searches with the question alone) and fills the cache for "
            "the next turn that asks it. Raise it to always use a slow model's keywords."),
    Setting("keyword_wait", "GRAPHGATE_KEYWORD_WAIT", "1", parse_positive_float,
            "Longest wait, in seconds, for an upstream slot for a turn's keyword extraction; past it the "
            "turn is searched with the question's embedding alone (as with keywords=off), at once when "
            "as many such calls already queue as there are slots: a saturated upstream never holds a "
            "chat back for long."),
    Setting("history_turns", "GRAPHGATE_HISTORY_TURNS", "3", int_between(0, 50),
            "Previous conversation turns the keyword extraction (and entity linking) sees, so follow-up "
            "questions resolve."),
    Setting("effort", "GRAPHGATE_EFFORT", "full", Knob(str, choices=("full", "light")),
            "`light`: every retrieval takes the light path a burst of chats gives a turn (see "
            "`burst_retrievals`); `full`: only under a burst. Per query, to ask for a quick answer or to "
            "measure the light path's recall."),
    Setting("burst_retrievals", "GRAPHGATE_BURST_RETRIEVALS", "2", int_between(0, 10_000),
            "Retrievals in flight beyond which a new one takes the light path: the chain walk for the "
            "expansion, no keyword call, evidence ranked by words and source chunks picked by weighted "
            "polling (no vector reads beyond the searches). Under a burst of chats each turn stays quick; "
            "its trace says what was shed. 0: never."),
    Setting("light_expansion", "GRAPHGATE_LIGHT_EXPANSION", "chains", choice("chains", "off"),
            "The light path's expansion: `chains` walks the strongest chains from the question's entities, "
            "keeping 2- and 3-hop answers (about 5 ms of CPU a turn on a 500-document store); `off` drops "
            "the expansion, for the quickest turns under a burst."),
    Setting("retrieval_threads", "GRAPHGATE_RETRIEVAL_THREADS", "2", int_between(1, 64),
            "Retrievals of a knowledge base whose searching, ranking and context building run at once "
            "(each in a worker thread); the others wait their turn, first come first served. Python runs "
            "one thread at a time: more at once would only share the same CPU, each turn slower, and starve the event "
            "loop that relays every chat's answer."),
    Setting("retrieval_timeout", "GRAPHGATE_RETRIEVAL_TIMEOUT", "10", parse_positive_float,
            "Seconds retrieval may take before the turn is forwarded without context."),
    Setting("rerank_url", "GRAPHGATE_RERANK_URL", "", parse_optional_url,
            "A re-ranking server speaking `/v1/rerank` (llama.cpp's server, vLLM, TEI, Infinity): its base URL "
            "(`/v1/rerank` is added; `/rerank` to one ending in `/v1`), or the endpoint's own URL ending in "
            "`rerank`. Unset: no re-ranking."),
    Setting("rerank_model", "GRAPHGATE_RERANK_MODEL", "", parse_optional_str,
            "The model the re-ranking server is asked for; unset: none named (the server's own)."),
    Setting("rerank_timeout", "GRAPHGATE_RERANK_TIMEOUT", "2", parse_positive_float,
            "Seconds a re-ranking may take; past it (or when the server fails or answers garbage) the fused "
            "order is kept and the trace says why."),
    Setting("rerank_top_n", "GRAPHGATE_RERANK_TOP_N", "0", int_between(0, 1000),
            "Chunks kept after re-ranking, best first; 0: all of them. Below GRAPHGATE_CHUNK_TOP_K, the "
            "re-ranking server chooses these among that many fused candidates."),
    Setting("plain_model_kb", "GRAPHGATE_PLAIN_MODEL_KB", "default", parse_plain_model_kb,
            "Knowledge base that grounds chats with plain upstream models (those that are not knowledge "
            "models, see /rag/models): a base's name, or `none` to forward them ungrounded."),
    Setting("scoped_keys_see_plain_models", "GRAPHGATE_SCOPED_KEYS_SEE_PLAIN_MODELS", "true", parse_bool,
            "Whether an API key limited to some knowledge bases sees and may chat with the upstream's plain "
            "models (off: only the knowledge models of its bases)."),
    Setting("augment_generate", "GRAPHGATE_AUGMENT_GENERATE", "false", parse_bool,
            "Also augment /api/generate (off by default, like LightRAG)."),
    Setting("answer_cache", "GRAPHGATE_ANSWER_CACHE", "false", parse_bool,
            "Cache answers to identical non-streaming augmented requests (invalidated by every change to the "
            "knowledge base)."),
    Setting("default_num_ctx", "GRAPHGATE_DEFAULT_NUM_CTX", "4096", int_between(256, 10_000_000),
            "Context window assumed when neither the request nor the model's parameters set `num_ctx`."),
    Setting("answer_reserve", "GRAPHGATE_ANSWER_RESERVE", "1024", int_between(0, 1_000_000),
            "Tokens of the context window kept free for the answer."),
    Setting("raise_num_ctx", "GRAPHGATE_RAISE_NUM_CTX", "false", parse_bool,
            "When a request sets no `num_ctx`, raise it so the full configured context fits (bounded by the "
            "model's trained context length)."),
    Setting("admin_password", "GRAPHGATE_ADMIN_PASSWORD", "", parse_optional_str,
            "Password of the console at /admin/ (and of mutating /rag/* calls without the API key). Unset: the "
            "console answers loopback clients only, and only while no API key is in use; once one is "
            "(GRAPHGATE_API_KEY or a stored key) it asks for an admin key instead.", secret=True),
    Setting("session_hours", "GRAPHGATE_SESSION_HOURS", "12", parse_positive_float,
            "How long a console login lasts."),
    Setting("session_secret", "GRAPHGATE_SESSION_SECRET", "", parse_optional_str,
            "The key console logins are signed with. Unset: a random one kept in the data directory "
            "(`session.key`). Give every replica the same one (16 characters or more) when several GraphGate "
            "replicas serve one store behind a load balancer, so a login works on any of them.", secret=True),
    Setting("suggest_threshold", "GRAPHGATE_SUGGEST_THRESHOLD", "0.9", parse_fraction,
            "Embedding similarity from which two entities are suggested as duplicates in the console."),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

# defaults too long for a table cell, or computed at start-up, in words (docs/configuration.md and --help)
DEFAULTS_IN_WORDS = {"cors_origins": "Ollama's defaults", "entity_types": "LightRAG's eleven",
                     "data_dir": "the user's data directory"}


def _parse(setting: Setting, raw: str, source: str) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        where = setting.flag if source == "cli" else setting.env
        shown = "(hidden: it is a secret)" if setting.secret else repr(raw)   # a mistyped URI holds a password
        raise SettingsError(f"{where}: invalid value {shown}: {exc}") from None


@dataclass(frozen=True)
class Settings:
    upstream: str = "http://127.0.0.1:11434"
    host: str = "127.0.0.1"
    port: int = 11435
    data_dir: Path = field(default_factory=user_data_dir)
    allowed_hosts: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    api_key: str | None = None
    metrics_require_key: bool = False
    max_body_bytes: int = 64 * 1024**2
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    discovery_timeout: float = 5.0
    cors_origins: tuple[str, ...] = field(default_factory=lambda: parse_origins(DEFAULT_ORIGINS))
    shutdown_grace: float = 5.0
    log_level: str = "info"
    llm_model: str | None = None
    embed_model: str = "nomic-embed-text"
    embed_batch: int = 32
    chunk_tokens: int = 1200
    chunk_overlap: int = 100
    entity_types: tuple[str, ...] = ("Person", "Creature", "Organization", "Location", "Event", "Concept",
                                     "Method", "Content", "Data", "Artifact", "NaturalObject")
    language: str = "auto"
    gleaning: int = 1
    entity_resolution: bool = True
    summary_fragments: int = 8
    summary_tokens: int = 1200
    community_summaries: bool = False
    embed_concurrency: int = 4
    llm_concurrency: int = 2
    parallel_documents: int = 4
    ingest_lease_seconds: float = 30.0
    llm_retries: int = 3
    max_upload_bytes: int = 50_000_000
    parse_seconds: float = 120.0
    parse_memory: int = 1024**3
    inbox_dir: Path | None = None
    index_save_seconds: float = 30.0
    kb_idle_seconds: float = 300.0
    vector_dtype: str = "i8"
    db_memory: str = "1GB"
    store: str = "embedded"
    mode: str = "mix"
    top_k: int = 40
    chunk_top_k: int = 20
    max_entity_tokens: int = 6000
    max_relation_tokens: int = 8000
    max_total_tokens: int = 30000
    cosine_threshold: float = 0.2
    related_chunks: int = 5
    chunk_selection: str = "vector"
    keywords: str = "llm"
    fusion: str = "roundrobin"
    linking: str = "on"
    expansion: str = "ppr"
    relation_ranking: str = "question"
    keyword_search: str = "off"
    context_layout: str = "evidence"
    communities: str = "off"
    keyword_model: str | None = None
    keyword_budget: float = 0.025
    keyword_wait: float = 1.0
    history_turns: int = 3
    effort: str = "full"
    burst_retrievals: int = 2
    light_expansion: str = "chains"
    retrieval_threads: int = 2
    retrieval_timeout: float = 10.0
    rerank_url: str | None = None
    rerank_model: str | None = None
    rerank_timeout: float = 2.0
    rerank_top_n: int = 0
    plain_model_kb: str = "default"
    scoped_keys_see_plain_models: bool = True
    augment_generate: bool = False
    answer_cache: bool = False
    default_num_ctx: int = 4096
    answer_reserve: int = 1024
    raise_num_ctx: bool = False
    admin_password: str | None = None
    session_hours: float = 12.0
    session_secret: str | None = None
    suggest_threshold: float = 0.9
    # where each value came from: "default", "env" or "cli" (shown by the console)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    # warnings about the values found while loading (a legacy ./graphgate-data store), for the log
    notices: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None,
             overrides: Mapping[str, str | None] | None = None) -> Settings:
        """Defaults, then the environment, then command-line ``overrides`` (raw strings)."""
        environ = os.environ if environ is None else environ
        overrides = overrides or {}
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for setting in SETTINGS:
            raw, source = setting.default, "default"
            if setting.env in environ:
                raw, source = environ[setting.env], "env"
            if overrides.get(setting.name) is not None:
                raw, source = str(overrides[setting.name]), "cli"
            values[setting.name] = _parse(setting, raw, source)
            sources[setting.name] = source
        notices: tuple[str, ...] = ()
        if values["data_dir"] is None:  # unset (or set empty): the per-user default
            found, notice = default_data_dir()
            if found is None:
                raise SettingsError(f"GRAPHGATE_DATA_DIR is not set and {notice}")
            values["data_dir"] = found
            sources["data_dir"] = "default" if notice is None else "a legacy ./graphgate-data"
            notices = (notice,) if notice else ()
        return cls(**values, sources=sources, notices=notices)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def settings_markdown() -> str:
    """The settings reference table of docs/configuration.md (``graphgate settings --markdown``)."""
    lines = ["| Variable | Flag | Default | Meaning |", "|---|---|---|---|"]
    for setting in SETTINGS:
        default = DEFAULTS_IN_WORDS.get(setting.name) or (f"`{setting.default}`" if setting.default else "(unset)")
        meaning = setting.help.replace("|", "\\|")
        lines.append(f"| `{setting.env}` | `{setting.flag}` | {default} | {meaning} |")
    return "\n".join(lines) + "\n"
