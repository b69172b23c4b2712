"""The store's embedding models held against GRAPHGATE_EMBED_MODEL, and what a difference means
while it lasts.

Each vector table records the model its vectors come from (proxy/store/vector_models.py). When a
table holding vectors names another model than the configured one (GRAPHGATE_EMBED_MODEL was
changed, and `graphgate reindex` not run yet):

- ingestion waits: uploads are stored and stay pending, each showing the sentence below, and are
  processed once the store is re-embedded or the setting put back (the pipeline's gate). Refusing
  them would lose what an inbox folder or a script sends meanwhile, for a state its user chose and
  ends with one command; and the store itself refuses any commit that would mix the models;
- questions are embedded by the model the stored vectors come from, while the upstream still has
  it: the new model's vectors would be compared with the old ones, which means nothing (of another
  dimension, they cannot even be compared). Chats stay grounded as they were before the change;
  the trace says which model embedded the question. Without that model upstream, the embedding
  call fails and the turn goes through ungrounded, its trace saying why;
- the gateway says so: in its log (once, when it starts or the state changes), in /rag/health (a
  problem naming both models and the command that fixes it), on the console's dashboard and in
  /metrics (``graphgate_embedding_model_mismatch``).

The check is made again after every commit, including another replica's or a re-embedding's
reload on a shared store: a `graphgate reindex` run beside a PostgreSQL gateway opens its gate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.errors import GraphGateError
from proxy.core.settings_sections import EmbeddingGuardSettings
from proxy.ingest.gate import IngestGate
from proxy.store.store import KnowledgeStore
from proxy.store.vector_models import VECTOR_TABLES, TableModel, canonical_model, same_model
from proxy.upstream.model_calls import ModelClient

log = logging.getLogger("graphgate")


@dataclass(frozen=True)
class EmbeddingCheck:
    configured: str                      # GRAPHGATE_EMBED_MODEL
    tables: Mapping[str, TableModel]     # every vector table's record
    vectors: Mapping[str, int]           # how many vectors each table holds
    staged: Mapping[str, int]            # vectors an unfinished re-embedding made, per model
    kb: str = "default"
    shared: bool = False                 # a PostgreSQL store (reindex runs beside the gateway)

    @property
    def stored(self) -> dict[str, str]:
        """The recorded model of each table that holds vectors."""
        return {table: record.model for table, record in self.tables.items()
                if record.model is not None and self.vectors.get(table, 0) > 0}

    @property
    def mismatched(self) -> dict[str, str]:
        """The tables whose vectors come from another model than the configured one, and that model."""
        return {table: model for table, model in self.stored.items() if not same_model(model, self.configured)}

    @property
    def ok(self) -> bool:
        return not self.mismatched

    @property
    def search_model(self) -> str | None:
        """The model questions are embedded by instead of the configured one: the stored vectors'
        model, when the tables holding vectors agree on one (None: the configured one)."""
        models = {canonical_model(model): model for model in self.stored.values()}
        if self.ok or len(models) != 1:
            return None
        return next(iter(models.values()))

    @property
    def command(self) -> str:
        return "graphgate reindex" + ("" if self.kb == "default" else f" --kb {self.kb}")

    def problem(self, upstream_models: Sequence[str] | None = None) -> str | None:
        """The sentence for the log, /rag/health, the dashboard and the waiting documents (None:
        nothing wrong). ``upstream_models``: the upstream's model names, when known."""
        if self.ok:
            return None
        by_model: dict[str, list[str]] = {}
        for table, model in self.mismatched.items():
            by_model.setdefault(model, []).append(table)
        stored = "; ".join(f"{model} ({', '.join(tables)})" for model, tables in by_model.items())
        search = self.search_model
        grounded = (f"chats are grounded with questions embedded by {search}" if search is not None else
                    f"chats are grounded with questions embedded by {self.configured}, which only part of "
                    "the store's vectors match")
        first = "" if self.shared else " (stop GraphGate first: it needs the store to itself)"
        sentence = (f"the knowledge store's vectors come from {stored}, not from GRAPHGATE_EMBED_MODEL="
                    f"{self.configured}: new documents wait (pending) and {grounded}; run `{self.command}`{first} "
                    f"to re-embed everything with {self.configured}")
        if search is not None:
            sentence += f", or set GRAPHGATE_EMBED_MODEL back to {search}"
        made = sum(count for model, count in self.staged.items() if same_model(model, self.configured))
        if made:
            sentence += (f"; a re-embedding with {self.configured} was interrupted after {made} vectors: "
                         "the command goes on from there")
        if search is not None and upstream_models is not None and \
                canonical_model(search) not in {canonical_model(m) for m in upstream_models}:
            sentence += (f"; {search} is not on the upstream any more, so chats go through without your "
                         "documents until then")
        return sentence

    def describe(self) -> dict[str, Any]:
        """For /rag/health's ``embedding``."""
        return {"configured": self.configured,
                "tables": {table: {"model": record.model, "dim": record.dim, "vectors": self.vectors.get(table, 0)}
                           for table, record in self.tables.items()},
                "mismatched": sorted(self.mismatched),
                "questions_embedded_by": self.search_model or self.configured,
                "reembedding": dict(self.staged) or None}


class EmbeddingGuard:
    """The latest ``EmbeddingCheck`` of one knowledge base, and its effects: the pipeline's gate, the
    model questions are embedded by, the dimension the model client expects."""

    def __init__(self, store: KnowledgeStore, models: ModelClient, gate: IngestGate, settings: EmbeddingGuardSettings,
                 kb: str = "default") -> None:
        self.store = store
        self.models = models
        self.gate = gate
        self.settings = settings
        self.kb = kb
        self.check = EmbeddingCheck(settings.embed_model, {t: TableModel(None, None) for t in VECTOR_TABLES},
                                    {}, {}, kb, store.backend.shared)

    # what the metrics read (proxy/monitoring/knowledge_gauges.py)

    @property
    def configured(self) -> str:
        return self.check.configured

    @property
    def mismatched(self) -> dict[str, str]:
        return self.check.mismatched

    async def refresh(self) -> EmbeddingCheck:
        """Read the store's records again and act on them."""
        reembed = self.store.tables.reembed
        check = EmbeddingCheck(self.settings.embed_model, await reembed.models(),
                               {table: self.store.vector_count(table) for table in VECTOR_TABLES},
                               await reembed.staged_models(), self.kb, self.store.backend.shared)
        dim = await self.store.tables.meta("embed_dim")
        self.models.expected_dim = int(dim) if dim else None   # a re-embedding elsewhere may have changed it
        self.models.search_model = check.search_model
        problem = check.problem()
        if problem is None:
            if self.gate.closed:
                log.info("knowledge base %s: the store's vectors now come from %s; ingestion goes on",
                         self.kb, self.settings.embed_model)
            self.gate.open()
        else:
            if problem != self.gate.reason:
                log.warning("knowledge base %s: %s", self.kb, problem)
            self.gate.close(problem)
        self.check = check
        return check

    async def follow(self) -> None:
        """``refresh`` after every commit (this replica's, or another's it follows); until cancelled."""
        seen = self.store.generation
        while True:
            await self.store.wait_for_commit(seen)
            seen = self.store.generation   # before reading: a commit made meanwhile is seen next time
            try:
                await self.refresh()
            except GraphGateError as exc:   # the store away for a moment: the next commit tries again
                log.warning("could not check the store's embedding models: %s", exc.message)
