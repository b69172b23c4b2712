"""Which embedding model made each vector table's vectors, recorded beside them, and the rule that
keeps a table to one model.

Each vector table (chunks, entities, relations, communities) records the model its vectors come
from and their dimension in the meta table (``embed_model:<table>``, ``embed_dim:<table>``). A
commit that adds vectors names their model (``Changeset.embed_model``); it is refused when the
table holds vectors of another model (``guard_vectors``, in the commit's transaction), so a
changed GRAPHGATE_EMBED_MODEL can never mix a second model's vectors into a table. A table that
holds none (new, or emptied) takes the new model on. ``graphgate reindex`` moves every table to a
new model at once (``proxy/store/*/reembed.py``).

A store made before these records kept one, store-wide (``embed_model``, ``embed_dim``): the schema
migration gives every table that one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.core.errors import EmbeddingModelMismatch
from proxy.store.changes import Changeset, IndexDelta

VECTOR_TABLES = ("chunks", "entities", "relations", "communities")
# the tables a re-embedding makes new vectors for; the community summaries are derived from the
# entities (their digests name the members' vector keys, which a re-embedding changes): dropped
# and written again by the next idle run of a gateway, from the LLM cache
REEMBEDDED = ("chunks", "entities", "relations")


def model_key(table: str) -> str:
    return f"embed_model:{table}"


def dim_key(table: str) -> str:
    return f"embed_dim:{table}"


def canonical_model(name: str) -> str:
    """A model's name as Ollama matches it: no tag means ``:latest``, case does not count."""
    return (name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest").lower()


def same_model(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and canonical_model(a) == canonical_model(b)


@dataclass(frozen=True)
class TableModel:
    """What a vector table records of its vectors' model (None: nothing recorded yet)."""
    model: str | None
    dim: int | None


def read_models(read: Callable[[str], str | None]) -> dict[str, TableModel]:
    """Every vector table's record, through ``read(meta key)``."""
    out = {}
    for table in VECTOR_TABLES:
        dim = read(dim_key(table))
        out[table] = TableModel(read(model_key(table)), int(dim) if dim else None)
    return out


def mismatch_message(table: str, recorded: str, model: str) -> str:
    return (f"the knowledge store's {table} vectors come from {recorded}, not from {model} "
            f"(GRAPHGATE_EMBED_MODEL): nothing made with {model} is added to them; run `graphgate reindex` to "
            f"re-embed everything with {model}, or set GRAPHGATE_EMBED_MODEL back to {recorded}")


def guard_vectors(changes: Changeset, deltas: dict[str, IndexDelta], read: Callable[[str], str | None],
                  write: Callable[[str, str | int], None], others: Callable[[str, list[int]], int]) -> None:
    """In a commit's transaction, once its rows are written: every table it added vectors to must
    record their model, or hold no vectors but these (``others(table, added keys)``: how many rows
    of the table have other keys); then it records the model and dimension. EmbeddingModelMismatch
    (409) otherwise, which rolls the commit back. A changeset that names no model (a store used
    without a knowledge service, in tests) is not checked."""
    model = changes.embed_model
    if model is None:
        return
    for table, delta in deltas.items():
        if not delta.added_vectors:
            continue
        recorded = read(model_key(table))
        if same_model(recorded, model):
            if read(dim_key(table)) is None:
                write(dim_key(table), len(delta.added_vectors[0]))
            continue
        if recorded is not None and others(table, delta.added_keys):
            raise EmbeddingModelMismatch(mismatch_message(table, recorded, model))
        write(model_key(table), model)
        write(dim_key(table), len(delta.added_vectors[0]))
    if any(delta.added_vectors for delta in deltas.values()):
        write("embed_model", model)   # the store-wide record older releases read
