"""The graph's tables held to the same answers on both backends (DuckDB and PostgreSQL): what
recomputation reads (aliases, touched rows, stored rows, embeddings, extractions, edits), curation's
reads and writes (aliases and edits committed through ``write_curation``, dismissed suggestions), the
console's entity queries (names pages, matching keys, types, an entity's page), retrieval's reads
by vector key, community summaries, and re-embedding for a new model.

Rows are written through each backend's commit path (``write_changes``), as the store writes them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import numpy as np
import pytest

from proxy.store.changes import (
    Changeset,
    ChunkRow,
    CommunityRow,
    Curation,
    EntityEdit,
    EntityRow,
    RelationEdit,
    RelationRow,
    pair_key,
)
from proxy.store.clock import now
from proxy.store.duckdb import commit as duckdb_commit
from proxy.store.duckdb.graph_rows import DuckDBGraphRows
from proxy.store.duckdb.reembed import DuckDBReembed
from proxy.store.postgres import commit as postgres_commit
from proxy.store.postgres.graph_rows import PgGraphRows
from proxy.store.postgres.reembed import PgReembed, typed_dimensions, vector_indexes
from proxy.store.protocols.communities import CommunityTables, StoredCommunity
from proxy.store.protocols.graph_rows import GraphRows, StoredEdits, StoredEntity, StoredRelation, StoredRow
from proxy.store.protocols.reembed import ReembedTables
from proxy.store.protocols.retrieval_rows import RetrievalRows
from proxy.store.sql_communities import SqlCommunities
from proxy.store.sql_graph_rows import write_curation
from proxy.store.sql_retrieval_rows import SqlRetrievalRows
from proxy.store.vector_models import REEMBEDDED, VECTOR_TABLES, TableModel

pytestmark = pytest.mark.anyio

Backend = tuple[str, Any]
DIM = 3
ALICE_BOB = pair_key("alice", "bob")
BERLIN_BOB = pair_key("berlin", "bob")
CLUB_ZOE = pair_key("100%_club", "zoë")


def vector(seed: int, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).random(dim, dtype=np.float32)


ENTITIES = [  # name key, name, type, description, sources
    ("alice", "Alice", "Person", "Alice, a sailor.", ["c1"]),
    ("bob", "Bob", "Person", "Bob builds boats.", ["c1", "c2"]),
    ("berlin", "Berlin", "Place", "A city.", ["c1"]),
    ("zoë", "Zoë", "Person", "Zoë sails.", ["c3"]),
    ("100%_club", "100%_Club", "Organization", "A club.", ["c3"]),
]
RELATIONS = [  # source, target, keywords, description, weight, sources
    ("alice", "bob", ["met"], "Alice met Bob.", 1.0, ["c1"]),
    ("bob", "berlin", ["lives in"], "Bob lives in Berlin.", 2.0, ["c1", "c2"]),
    ("zoë", "100%_club", ["member"], "Zoë is a member.", 1.5, ["c3"]),
]
CHUNKS = [("c1", "Alice met Bob in Berlin.", 6), ("c2", "Bob builds boats.", 4), ("c3", "Zoë sails with the club.", 6)]


def placeholders(name: str, sql: str) -> str:
    """DuckDB's ``?`` placeholders as psycopg's ``%s`` for PostgreSQL (test set-up only)."""
    return sql if name == "embedded" else sql.replace("?", "%s")


def graph_rows_of(backend: Backend) -> GraphRows:
    name, db = backend
    return DuckDBGraphRows(db) if name == "embedded" else PgGraphRows(db)


def retrieval_rows_of(backend: Backend) -> RetrievalRows:
    _, db = backend
    return SqlRetrievalRows(db)   # written once for both


def communities_of(backend: Backend) -> CommunityTables:
    _, db = backend
    return SqlCommunities(db)   # written once for both


def reembed_of(backend: Backend, dtype: str = "f32") -> ReembedTables:
    name, db = backend
    return DuckDBReembed(db) if name == "embedded" else PgReembed(db, dtype)


async def commit(backend: Backend, changes: Changeset, dtype: str = "f32") -> None:
    """A changeset through the backend's own commit path (``dtype``: the vectors' element type)."""
    name, db = backend
    if name == "embedded":
        await db.write(duckdb_commit.write_changes, changes)
    else:
        await db.write(postgres_commit.write_changes, changes, dtype)


async def curate(backend: Backend, curation: Curation) -> None:
    _, db = backend
    await db.write(db.dialect.bind(write_curation), curation, now())   # written once for both


async def execute(backend: Backend, sql: str, params: list[Any]) -> None:
    name, db = backend
    await db.write(lambda con: con.execute(placeholders(name, sql), params))


async def scalar(backend: Backend, sql: str, params: list[Any] | None = None) -> Any:
    name, db = backend
    row = await db.read(lambda con: con.execute(placeholders(name, sql), params or []).fetchone())
    return row[0] if row else None


def relation_row(n: int, a: str, b: str, keywords: list[str], description: str, weight: float,
                 sources: list[str]) -> RelationRow:
    source, target = sorted((a, b))
    return RelationRow(pair_key(a, b), source, target, keywords, description, weight, sources,
                       f"h-{pair_key(a, b)}", vector(20 + n))


async def seed(backend: Backend) -> None:
    """Two documents, three chunks, five entities, three relations, their extractions."""
    stamp = now()
    for document_id, document_name in (("d1", "notes.txt"), ("d2", "alpha.txt")):
        await execute(backend, "INSERT INTO documents (id, name, mime, size, status, text, created_at, updated_at) "
                               "VALUES (?, ?, 'text/plain', 10, 'processed', '', ?, ?)",
                      [document_id, document_name, stamp, stamp])
    await commit(backend, Changeset(
        chunks_added=[ChunkRow(i, content, tokens, vector(n)) for n, (i, content, tokens) in enumerate(CHUNKS)],
        links_added=[("d1", "c1", 0), ("d1", "c2", 1), ("d2", "c2", 0), ("d2", "c3", 1)],
        entities_upserted=[EntityRow(key, name, kind, description, sources, f"h-{key}", vector(10 + n))
                           for n, (key, name, kind, description, sources) in enumerate(ENTITIES)],
        relations_upserted=[relation_row(n, *relation) for n, relation in enumerate(RELATIONS)]))
    for chunk_id, _, _ in CHUNKS:
        await execute(backend, "INSERT INTO extractions VALUES (?, 'm', ?, '[]', ?)",
                      [chunk_id, json.dumps({"chunk": chunk_id}), stamp])


async def key_of(backend: Backend, table: str, id_column: str, row_id: str) -> int:
    return int(await scalar(backend, f"SELECT key FROM {table} WHERE {id_column} = ?", [row_id]))


async def test_recomputation_reads_rows_embeddings_and_extractions(backend_db: Backend) -> None:
    await seed(backend_db)
    rows = graph_rows_of(backend_db)
    assert await rows.touched_by(["c3"]) == ({"zoë", "100%_club"}, {CLUB_ZOE})
    assert await rows.touched_by(["c2", "c9"]) == ({"bob"}, {BERLIN_BOB})
    assert await rows.touched_by([]) == (set(), set())

    stored = await rows.stored_rows("entities", ["bob", "nobody"])
    assert stored == {"bob": StoredRow("Bob", ["c1", "c2"], await key_of(backend_db, "entities", "name_key", "bob"),
                                       "h-bob")}
    pairs = await rows.stored_rows("relations", [BERLIN_BOB])
    assert pairs == {BERLIN_BOB: StoredRow("", ["c1", "c2"],
                                           await key_of(backend_db, "relations", "pair_key", BERLIN_BOB),
                                           f"h-{BERLIN_BOB}")}
    assert await rows.stored_rows("entities", []) == {}

    # in the order of the sorted keys, float32, as committed
    matrix = await rows.embeddings("entities", ["zoë", "alice", "100%_club"])
    assert matrix.dtype == np.float32 and matrix.shape == (3, DIM)
    assert np.allclose(matrix, np.vstack([vector(14), vector(10), vector(13)]))
    relations = await rows.embeddings("relations", [CLUB_ZOE, ALICE_BOB])
    assert np.allclose(relations, np.vstack([vector(22), vector(20)]))
    empty = await rows.embeddings("entities", ["nobody"])
    assert empty.dtype == np.float32 and empty.shape == (0, 0)

    assert await rows.extractions(["c1", "c9"]) == {"c1": json.dumps({"chunk": "c1"})}
    assert await rows.extractions([]) == {}


async def test_aliases_written_with_a_commit_resolve_names(backend_db: Backend) -> None:
    await seed(backend_db)
    rows = graph_rows_of(backend_db)
    assert await rows.aliases() == {} and rows.aliases_sync() == {}
    await curate(backend_db, Curation(aliases={"al": "alice", "bobby": "bob"}))
    # and in a commit of graph rows (the commit path runs write_curation in its transaction)
    await commit(backend_db, Changeset(entities_removed=["berlin"], curation=Curation(aliases={"robert": "bob"})))
    assert await rows.aliases() == {"al": "alice", "bobby": "bob", "robert": "bob"}
    assert rows.aliases_sync() == await rows.aliases()
    assert await rows.alias_target("bobby") == "bob" and await rows.alias_target("bob") is None
    assert await rows.resolve_name("bob") == "bob"
    assert await rows.resolve_name("robert") == "bob"
    assert await rows.resolve_name("nobody") is None

    # an alias moves to another target; one is dropped; a target loses all its aliases, even one
    # written in the same commit
    await curate(backend_db, Curation(aliases={"al": "berlin", "bobster": "bob", "ali": "alice"},
                                      aliases_dropped=["robert"], aliases_into_dropped=["bob"]))
    assert await rows.aliases() == {"al": "berlin", "ali": "alice"}


async def test_hand_edits_are_written_replaced_and_dropped(backend_db: Backend) -> None:
    await seed(backend_db)
    rows = graph_rows_of(backend_db)
    assert await rows.edits(["alice"], [ALICE_BOB]) == StoredEdits({}, {})
    await curate(backend_db, Curation(
        entity_edits={"alice": EntityEdit(name="Alicia", description="Edited."), "bob": EntityEdit(type="Builder")},
        relation_edits={ALICE_BOB: RelationEdit(["knows", "met"], None, 2.5),
                        BERLIN_BOB: RelationEdit(None, "Bob moved.", None)}))
    assert await rows.edits(["alice", "bob", "zoë"], [ALICE_BOB, BERLIN_BOB, CLUB_ZOE]) == StoredEdits(
        {"alice": EntityEdit("Alicia", None, "Edited."), "bob": EntityEdit(None, "Builder", None)},
        {ALICE_BOB: RelationEdit(["knows", "met"], None, 2.5), BERLIN_BOB: RelationEdit(None, "Bob moved.", None)})
    assert await rows.edits([], []) == StoredEdits({}, {})

    await curate(backend_db, Curation(entity_edits={"alice": EntityEdit(type="Captain")},
                                      relation_edits={ALICE_BOB: RelationEdit([], "Friends.", None)},
                                      entity_edits_dropped=["bob"], relation_edits_dropped=[BERLIN_BOB]))
    assert await rows.edits(["alice", "bob"], [ALICE_BOB, BERLIN_BOB]) == StoredEdits(
        {"alice": EntityEdit(None, "Captain", None)}, {ALICE_BOB: RelationEdit([], "Friends.", None)})


async def test_curation_reads_entities_and_relations(backend_db: Backend) -> None:
    await seed(backend_db)
    rows = graph_rows_of(backend_db)
    assert await rows.entities(["bob", "zoë", "nobody"]) == {
        "bob": StoredEntity("Bob", "Person", "Bob builds boats.", ["c1", "c2"]),
        "zoë": StoredEntity("Zoë", "Person", "Zoë sails.", ["c3"])}
    assert await rows.entities([]) == {}
    assert await rows.relations_touching(["bob"]) == [
        StoredRelation(ALICE_BOB, "alice", "bob", ["c1"]), StoredRelation(BERLIN_BOB, "berlin", "bob", ["c1", "c2"])]
    assert await rows.relations_touching(["100%_club", "alice"]) == [
        StoredRelation(CLUB_ZOE, "100%_club", "zoë", ["c3"]), StoredRelation(ALICE_BOB, "alice", "bob", ["c1"])]
    assert await rows.relations_touching([]) == []
    assert await rows.relation(BERLIN_BOB) == StoredRelation(BERLIN_BOB, "berlin", "bob", ["c1", "c2"])
    assert await rows.relation(pair_key("alice", "zoë")) is None


async def test_dismissed_suggestions(backend_db: Backend) -> None:
    rows = graph_rows_of(backend_db)
    assert rows.dismissed_sync() == set()
    await rows.dismiss(ALICE_BOB)
    await rows.dismiss(ALICE_BOB)   # twice: still one
    await rows.dismiss(BERLIN_BOB)
    assert rows.dismissed_sync() == {ALICE_BOB, BERLIN_BOB}
    assert await scalar(backend_db, "SELECT count(*) FROM dismissed_suggestions") == 2


async def test_names_pages_and_matching_keys(backend_db: Backend) -> None:
    await seed(backend_db)
    rows = graph_rows_of(backend_db)
    # by name, case-insensitive, then by key
    assert await rows.names_page("", "", False, 2, 0) == (["100%_club", "alice"], 5)
    assert await rows.names_page("", "", False, 2, 2) == (["berlin", "bob"], 5)
    assert await rows.names_page("", "", False, 2, 4) == (["zoë"], 5)
    assert await rows.names_page("", "", True, 3, 0) == (["zoë", "bob", "berlin"], 5)
    assert await rows.names_page("", "Person", False, 10, 0) == (["alice", "bob", "zoë"], 3)
    assert await rows.names_page("B", "Person", False, 10, 0) == (["bob"], 1)
    assert await rows.names_page("nothing", "", False, 10, 0) == ([], 0)
    # LIKE's wildcards are searched as themselves
    assert await rows.names_page("%", "", False, 10, 0) == (["100%_club"], 1)
    assert await rows.names_page("_", "", False, 10, 0) == (["100%_club"], 1)
    assert await rows.names_page("e%", "", False, 10, 0) == ([], 0)

    assert sorted(await rows.matching_keys("", "")) == sorted(key for key, *_ in ENTITIES)
    assert sorted(await rows.matching_keys("LI", "")) == ["alice", "berlin"]
    assert sorted(await rows.matching_keys("li", "Place")) == ["berlin"]
    assert await rows.matching_keys("", "Nothing") == []
    assert await rows.matching_keys("%_", "") == ["100%_club"]

    # most frequent first, then by name
    assert await rows.entity_types() == [("Person", 3), ("Organization", 1), ("Place", 1)]


async def test_an_entitys_page(backend_db: Backend) -> None:
    await seed(backend_db)
    rows = graph_rows_of(backend_db)
    await curate(backend_db, Curation(aliases={"robert": "bob", "bobby": "bob", "al": "alice"},
                                      resolved={"bobby": ("same name", "Bobby / Bob")},
                                      entity_edits={"bob": EntityEdit(description="Edited.")}))
    detail = await rows.entity_detail("bob", 1)
    assert detail is not None
    created, updated = detail.pop("created_at"), detail.pop("updated_at")
    assert isinstance(created, datetime) and isinstance(updated, datetime) and created <= updated
    assert detail == {
        "key": "bob", "name": "Bob", "type": "Person", "description": "Bob builds boats.", "sources": ["c1", "c2"],
        "aliases": ["bobby", "robert"], "edited": True,
        "resolved": [{"alias": "bobby", "reason": "same name", "evidence": "Bobby / Bob"}],   # made at ingestion
        "documents": [{"id": "d2", "name": "alpha.txt", "chunks": 1}, {"id": "d1", "name": "notes.txt", "chunks": 2}],
        "chunks": [{"id": "c1", "content": "Alice met Bob in Berlin."}],
    }
    zoe = await rows.entity_detail("zoë", 5)
    assert zoe is not None and zoe["edited"] is False and zoe["aliases"] == []
    assert zoe["documents"] == [{"id": "d2", "name": "alpha.txt", "chunks": 1}]
    assert zoe["chunks"] == [{"id": "c3", "content": "Zoë sails with the club."}]
    assert await rows.entity_detail("nobody", 5) is None


async def test_descriptions_and_chunk_texts_by_vector_key(backend_db: Backend) -> None:
    await seed(backend_db)
    rows, retrieval = graph_rows_of(backend_db), retrieval_rows_of(backend_db)
    bob = await key_of(backend_db, "entities", "name_key", "bob")
    zoe = await key_of(backend_db, "entities", "name_key", "zoë")
    gone = bob + 1_000_000   # a key from before a commit re-keyed the row: found by its name
    expected = {bob: "Bob builds boats.", zoe: "Zoë sails.", gone: "Bob builds boats."}
    wanted = [(bob, "bob"), (zoe, "zoë"), (gone, "bob")]
    assert await rows.descriptions("entities", wanted) == expected
    assert retrieval.descriptions_sync("entities", wanted) == expected
    assert retrieval.descriptions_sync("entities", [(gone + 1, "nobody")]) == {}
    assert retrieval.descriptions_sync("entities", []) == {}
    pair = await key_of(backend_db, "relations", "pair_key", BERLIN_BOB)
    assert await rows.descriptions("relations", [(pair, BERLIN_BOB), (pair + 1_000_000, ALICE_BOB)]) == {
        pair: "Bob lives in Berlin.", pair + 1_000_000: "Alice met Bob."}

    c1, c3 = (await key_of(backend_db, "chunks", "id", "c1"), await key_of(backend_db, "chunks", "id", "c3"))
    assert retrieval.chunk_texts_sync([c1, c3, c3 + 1_000_000]) == {
        "c1": ("Alice met Bob in Berlin.", 6), "c3": ("Zoë sails with the club.", 6)}
    assert retrieval.chunk_texts_sync([]) == {}
    assert retrieval.extractions_sync(["c2", "c9"]) == {"c2": json.dumps({"chunk": "c2"})}
    assert retrieval.extractions_sync([]) == {}


async def test_community_summaries(backend_db: Backend) -> None:
    communities = communities_of(backend_db)
    assert communities.digests_sync() == {} and communities.by_keys_sync([1]) == {}
    await commit(backend_db, Changeset(communities_upserted=[
        CommunityRow("k1", "Sailors", "They sail.", ["zoë", "alice"], "dig1", vector(30)),
        CommunityRow("k2", "Builders", "They build.", ["bob"], "dig2", vector(31))]))
    assert communities.digests_sync() == {"k1": ("dig1", ("zoë", "alice")), "k2": ("dig2", ("bob",))}
    k1 = await key_of(backend_db, "communities", "id", "k1")
    assert communities.by_keys_sync([k1, k1 + 1_000_000]) == {
        k1: StoredCommunity("k1", k1, "Sailors", "They sail.", ("zoë", "alice"))}
    assert communities.by_keys_sync([]) == {}


@pytest.mark.parametrize("dtype", ["f32", "f16"])   # PostgreSQL: a vector index, or a halfvec one on a cast
async def test_re_embedding_with_a_model_of_another_dimension(backend_db: Backend, dtype: str) -> None:
    """The new vectors are staged a batch at a time (the rows keep theirs meanwhile), then swapped in
    for every table in one transaction (proxy/store/protocols/reembed.py)."""
    name, db = backend_db
    await seed(backend_db)
    await commit(backend_db, Changeset(communities_upserted=[
        CommunityRow("k1", "Sailors", "They sail.", ["zoë"], "dig1", vector(30))], embed_model="old"), dtype)
    reembed, rows = reembed_of(backend_db, dtype), graph_rows_of(backend_db)
    assert (await reembed.models())["communities"] == TableModel("old", DIM)
    pending = {table: await reembed.to_embed(table, "new", None, 10) for table in REEMBEDDED}
    assert [(r.id, r.source, r.fields) for r in pending["chunks"]] == [(i, i, (content,)) for i, content, _ in CHUNKS]
    assert [(r.id, r.source, r.fields) for r in pending["entities"]] == sorted(
        (key, f"h-{key}", (n, d)) for key, n, _, d, _ in ENTITIES)
    assert [(r.id, r.fields) for r in pending["relations"]] == [
        (CLUB_ZOE, (["member"], "100%_Club", "Zoë", "Zoë is a member.")),
        (ALICE_BOB, (["met"], "Alice", "Bob", "Alice met Bob.")),
        (BERLIN_BOB, (["lives in"], "Berlin", "Bob", "Bob lives in Berlin."))]
    generation = int(await scalar(backend_db, "SELECT value FROM meta WHERE key = 'generation'"))
    old_keys = {key: await key_of(backend_db, "entities", "name_key", key) for key, *_ in ENTITIES}
    entity_keys = sorted(key for key, *_ in ENTITIES)

    # a batch staged is not asked for again; the rows keep their vectors until the swap
    first = await reembed.to_embed("entities", "new", None, 2)
    await reembed.stage("entities", "new", first, np.vstack([vector(40 + n, 5) for n in range(2)]), ["n0", "n1"])
    assert await reembed.progress("entities", "new") == (2, 5)
    rest = await reembed.to_embed("entities", "new", None, 10)
    assert [r.id for r in rest] == entity_keys[2:]
    assert await reembed.to_embed("entities", "new", first[-1].id, 10) == rest
    assert not await reembed.swap("new", 5)   # rows without a new vector: nothing changes
    assert int(await scalar(backend_db, "SELECT value FROM meta WHERE key = 'generation'")) == generation
    assert np.allclose(await rows.embeddings("entities", entity_keys), np.vstack(
        [vector(10 + [k for k, *_ in ENTITIES].index(key)) for key in entity_keys]))
    await reembed.stage("entities", "new", rest, np.vstack([vector(42 + n, 5) for n in range(3)]), ["n2", "n3", "n4"])
    await reembed.stage("chunks", "new", pending["chunks"], np.vstack([vector(n, 5) for n in range(3)]), None)
    pairs = [r.id for r in pending["relations"]]
    await reembed.stage("relations", "new", pending["relations"], np.vstack([vector(50 + n, 5) for n in range(3)]),
                        ["r0", "r1", "r2"])
    await reembed.stage("relations", "new", [], np.empty((0, 5), dtype=np.float32), [])
    with pytest.raises(ValueError):
        await reembed.stage("documents", "new", [], np.empty((0, 5), dtype=np.float32), None)
    # a row whose text changed after its vector was staged is embedded again
    await execute(backend_db, "UPDATE entities SET embed_hash = 'changed' WHERE name_key = 'alice'", [])
    again = await reembed.to_embed("entities", "new", None, 10)
    assert [(r.id, r.source) for r in again] == [("alice", "changed")]
    await reembed.stage("entities", "new", again, np.vstack([vector(41, 5)]), ["n1"])
    # staged vectors of another model, or of another dimension, are dropped when asked
    await reembed.stage("chunks", "other", pending["chunks"][:1], np.vstack([vector(9, 5)]), None)
    assert await reembed.staged_models() == {"new": 10, "other": 1}   # one staged vector a row: c1's replaced
    await reembed.stage("chunks", "new", pending["chunks"][1:2], np.vstack([vector(1, 4)]), None)
    assert await reembed.discard_staged("new", 5) == 2 and await reembed.staged_models() == {"new": 9}
    await reembed.stage("chunks", "new", pending["chunks"][:2], np.vstack([vector(n, 5) for n in range(2)]), None)
    assert await reembed.staged_models() == {"new": 11}
    assert await reembed.swap("new", 5)

    assert await reembed.staged_models() == {}
    assert await reembed.models() == {table: TableModel("new", 5) for table in VECTOR_TABLES}
    assert await scalar(backend_db, "SELECT value FROM meta WHERE key = 'embed_model'") == "new"
    assert await scalar(backend_db, "SELECT value FROM meta WHERE key = 'embed_dim'") == "5"
    assert int(await scalar(backend_db, "SELECT value FROM meta WHERE key = 'generation'")) > generation
    assert np.allclose(await rows.embeddings("entities", entity_keys), np.vstack([vector(40 + n, 5) for n in range(5)]))
    assert np.allclose(await rows.embeddings("relations", sorted(pairs)), np.vstack(
        [vector(50 + pairs.index(pair), 5) for pair in sorted(pairs)]))
    stored = await rows.stored_rows("entities", entity_keys)
    assert [stored[key].embed_hash for key in entity_keys] == ["n0", "n1", "n2", "n3", "n4"]
    assert all(stored[key].key != old_keys[key] for key in entity_keys)   # each vector under a new key
    new_keys = [await key_of(backend_db, table, column, i) for table, column, ids in (
        ("chunks", "id", ["c1", "c2", "c3"]), ("entities", "name_key", entity_keys),
        ("relations", "pair_key", pairs)) for i in ids]
    assert len(set(new_keys)) == len(new_keys)
    assert communities_of(backend_db).digests_sync() == {}   # derived: written again by the next idle run
    # a community summary of the new model's dimension commits
    await commit(backend_db, Changeset(communities_upserted=[
        CommunityRow("k1", "Sailors", "They sail.", ["zoë"], "dig1", vector(33, 5))], embed_model="new"), dtype)
    assert communities_of(backend_db).digests_sync() == {"k1": ("dig1", ("zoë",))}

    if name == "postgresql":   # the columns typed with the new dimension, and indexed again
        assert db.read_sync(typed_dimensions) == {t: 5 for t in ("chunks", "entities", "relations", "communities")}
        assert len(db.read_sync(vector_indexes)) == 4
        assert await scalar(backend_db, "SELECT value FROM meta WHERE key = 'vector_index'") == (
            "halfvec" if dtype == "f16" else "vector")
