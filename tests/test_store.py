"""The knowledge store with its real engines kept in step: the tables (DuckDB or PostgreSQL), the vector
indexes (USearch or pgvector) and igraph. The contract tests take ``store_backend`` and run on both
backends; those about DuckDB's and USearch's own files (migrations from old versions, DuckDB's threads,
index files lost or left behind by a crash) are named ``*_embedded_*`` and run on the embedded one only."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from proxy.core.errors import StoreUnavailable
from proxy.store.backends import Backend
from proxy.store.changes import Changeset, ChunkRow, DocumentUpdate, EntityRow, RelationRow, pair_key
from proxy.store.duckdb.schema import SCHEMA_VERSION, current_version
from proxy.store.store import KnowledgeStore
from tests.invariants import database, in_memory, tables_db
from tests.store_backends import set_meta

pytestmark = pytest.mark.anyio

DIM = 8


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def entity(name: str, seed: int, sources: list[str], key: int = 0) -> EntityRow:
    return EntityRow(name.casefold(), name, "Person", f"about {name}", sources, f"h{seed}", vec(seed), key)


def relation(a: str, b: str, seed: int, sources: list[str]) -> RelationRow:
    s, t = sorted((a.casefold(), b.casefold()))
    return RelationRow(pair_key(s, t), s, t, ["knows"], f"{a} knows {b}", 1.0, sources, f"r{seed}", vec(seed))


def sample_changes() -> Changeset:
    return Changeset(
        chunks_added=[ChunkRow("c1", "Alice met Bob.", 4, vec(1)), ChunkRow("c2", "Bob met Carol.", 4, vec(2))],
        entities_upserted=[entity("Alice", 3, ["c1"]), entity("Bob", 4, ["c1", "c2"]), entity("Carol", 5, ["c2"])],
        relations_upserted=[relation("Alice", "Bob", 6, ["c1"]), relation("Bob", "Carol", 7, ["c2"])],
    )


async def set_dim(store: KnowledgeStore) -> None:
    await set_meta(store, "embed_dim", DIM)


def assert_in_step(store: KnowledgeStore) -> None:
    read = tables_db(store).read_sync
    for table in ("chunks", "entities", "relations"):
        rows = read(lambda c, t=table: c.execute(f"SELECT key FROM {t}").fetchall())
        db_keys = sorted(r[0] for r in rows)
        assert sorted(int(k) for k in store.vector_keys_sync(table)) == db_keys, table
    names = {r[0] for r in read(lambda c: c.execute("SELECT name_key FROM entities").fetchall())}
    assert in_memory(store)[1].names() == names
    rows = read(lambda c: c.execute("SELECT source, target FROM relations").fetchall())
    pairs = {(r[0], r[1]) for r in rows}
    assert in_memory(store)[1].edge_pairs() == pairs
    assert set(in_memory(store)[0].entity_keys) == names
    assert {k for k in in_memory(store)[0].entities} == {int(k) for k in store.vector_keys_sync("entities")}
    chunk_ids = {r[0] for r in read(lambda c: c.execute("SELECT id FROM chunks").fetchall())}
    assert set(in_memory(store)[0].chunk_keys) == chunk_ids


async def test_embedded_schema_is_versioned(tmp_path: Path) -> None:
    store = await KnowledgeStore.open(tmp_path)
    assert database(store).read_sync(current_version) == SCHEMA_VERSION
    await store.close()
    again = await KnowledgeStore.open(tmp_path)  # migrating twice is a no-op
    assert database(again).read_sync(current_version) == SCHEMA_VERSION
    await again.close()


async def test_embedded_a_version_3_store_gains_the_llm_cache_key_index(tmp_path: Path) -> None:
    """v4 indexes the LLM cache by key (DuckDB scans the whole table for a lookup on the two-column
    primary key); an existing store is migrated and keeps its cached replies."""
    import duckdb

    from proxy.store.duckdb.cache import cached_responses
    from proxy.store.duckdb.schema import MIGRATIONS

    con = duckdb.connect(str(tmp_path / "graphgate.duckdb"))
    for script in MIGRATIONS[:3]:
        con.execute(script)
    con.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    con.execute("INSERT INTO llm_cache (kind, key, model, request, response, created_at) "
                "VALUES ('summary', 'k1', 'm', '{}', 'kept', now())")
    con.close()
    store = await KnowledgeStore.open(tmp_path)
    assert database(store).read_sync(current_version) == SCHEMA_VERSION >= 4  # v5 added communities
    indexes = database(store).read_sync(lambda c: [r[0] for r in c.execute(
        "SELECT index_name FROM duckdb_indexes() WHERE table_name = 'llm_cache'").fetchall()])
    assert "llm_cache_key" in indexes
    lookup = database(store).dialect.bind(cached_responses)
    assert database(store).read_sync(lookup, [("summary", "k1")]) == {("summary", "k1"): "kept"}
    await store.close()


async def test_embedded_duckdb_runs_single_threaded_once_the_store_is_loaded(tmp_path: Path) -> None:
    """Small statements would otherwise wake DuckDB's worker threads every time (bench/ingest.py)."""
    store = await KnowledgeStore.open(tmp_path)
    assert database(store).read_sync(lambda c: c.execute("SELECT current_setting('threads')").fetchone()[0]) == 1
    await store.close()


async def test_apply_updates_all_three_engines(tmp_path: Path, store_backend: Backend) -> None:
    store = await KnowledgeStore.open(tmp_path, backend=store_backend)
    await set_dim(store)
    await store.apply(sample_changes())
    stats = await store.stats()
    assert (stats["chunks"], stats["entities"], stats["relations"]) == (2, 3, 2)
    assert stats["index_sizes"] == {"chunks": 2, "entities": 3, "relations": 2}
    assert stats["graph"] == {"vertices": 3, "edges": 2}
    assert in_memory(store)[1].degree("bob") == 2
    best = store.search_sync("entities", vec(3), 1)
    alice_key = tables_db(store).read_sync(
        lambda c: c.execute("SELECT key FROM entities WHERE name_key='alice'").fetchone()[0])
    assert best[0][0] == alice_key and best[0][1] == pytest.approx(1.0, abs=1e-5)
    assert_in_step(store)
    await store.close()


async def test_an_entitys_incident_relations_follow_every_commit(tmp_path: Path, store_backend: Backend) -> None:
    """The entity channels' lists of a hub's relations are kept per commit (``incident_sync``): a
    commit that adds a relation, renames an end or removes one is seen by the next read."""
    store = await KnowledgeStore.open(tmp_path, backend=store_backend)
    await set_dim(store)
    await store.apply(sample_changes())

    def listed(key: str) -> dict[str, tuple[int, str, str]]:
        return {i.meta.pair: (i.central, i.source_name, i.target_name) for i in store.incident_sync([key])}

    assert listed("bob") == {pair_key("alice", "bob"): (3, "Alice", "Bob"),
                             pair_key("bob", "carol"): (3, "Bob", "Carol")}
    await store.apply(Changeset(chunks_added=[ChunkRow("c3", "Bob met Dan.", 4, vec(8))],
                                entities_upserted=[entity("Dan", 9, ["c3"])],
                                relations_upserted=[relation("Bob", "Dan", 10, ["c3"])]))
    assert listed("bob") == {pair_key("alice", "bob"): (4, "Alice", "Bob"),
                             pair_key("bob", "carol"): (4, "Bob", "Carol"), pair_key("bob", "dan"): (4, "Bob", "Dan")}
    carol = in_memory(store)[0].entity("carol")
    assert carol is not None
    await store.apply(Changeset(entities_upserted=[EntityRow("carol", "Caroline", "Person", "about Carol", ["c2"],
                                                             "h5b", vec(5), carol.key)]))
    assert listed("bob")[pair_key("bob", "carol")] == (4, "Bob", "Caroline")
    assert [i.meta.pair for i in store.incident_sync(["alice", "bob"])] == [
        pair_key("alice", "bob"), pair_key("bob", "carol"), pair_key("bob", "dan")]   # each once, by the keys' order
    await store.close()


async def test_reembedding_gives_a_new_key_and_drops_the_old(tmp_path: Path, store_backend: Backend) -> None:
    store = await KnowledgeStore.open(tmp_path, backend=store_backend)
    await set_dim(store)
    await store.apply(sample_changes())
    old = tables_db(store).read_sync(lambda c: c.execute("SELECT key FROM entities WHERE name_key='bob'").fetchone()[0])
    await store.apply(Changeset(entities_upserted=[entity("Bob", 40, ["c1", "c2"])]))
    new = tables_db(store).read_sync(lambda c: c.execute("SELECT key FROM entities WHERE name_key='bob'").fetchone()[0])
    assert new != old
    keys = {int(k) for k in store.vector_keys_sync("entities")}
    assert new in keys and old not in keys
    assert_in_step(store)
    await store.close()


async def test_removal_leaves_no_orphans_in_any_engine(tmp_path: Path, store_backend: Backend) -> None:
    store = await KnowledgeStore.open(tmp_path, backend=store_backend)
    await set_dim(store)
    await store.apply(sample_changes())
    await store.apply(Changeset(chunks_removed=["c2"], entities_removed=["carol"],
                                relations_removed=[pair_key("bob", "carol")]))
    stats = await store.stats()
    assert (stats["chunks"], stats["entities"], stats["relations"]) == (1, 2, 1)
    assert stats["graph"] == {"vertices": 2, "edges": 1}
    assert_in_step(store)
    await store.close()


async def test_embedded_crash_between_commit_and_index_save_heals(tmp_path: Path) -> None:
    store = await KnowledgeStore.open(tmp_path)
    await set_dim(store)
    await store.apply(sample_changes())
    await store.save()
    # a later commit reaches DuckDB but the process dies before the indexes are saved
    await store.apply(Changeset(chunks_added=[ChunkRow("c3", "Dave.", 2, vec(9))],
                                entities_upserted=[entity("Dave", 10, ["c3"])]))
    database(store).close()  # no save
    reopened = await KnowledgeStore.open(tmp_path)
    assert reopened.vector_count("chunks") == 3 and reopened.vector_count("entities") == 4
    assert_in_step(reopened)
    saved_generation = int((tmp_path / "chunks.gen").read_text().split()[0])
    assert saved_generation == reopened.generation  # healed copy saved
    await reopened.close()


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
async def test_embedded_missing_or_corrupt_index_files_are_rebuilt(tmp_path: Path, damage: str) -> None:
    store = await KnowledgeStore.open(tmp_path)
    await set_dim(store)
    await store.apply(sample_changes())
    await store.close()
    for name in ("chunks", "entities", "relations"):
        path = tmp_path / f"{name}.usearch"
        if damage == "delete":
            path.unlink()
        else:
            path.write_bytes(b"\x00garbage" * 10)
    reopened = await KnowledgeStore.open(tmp_path)
    assert_in_step(reopened)
    assert reopened.vector_count("relations") == 2
    await reopened.close()


async def test_document_update_and_generation(tmp_path: Path, store_backend: Backend) -> None:
    store = await KnowledgeStore.open(tmp_path, backend=store_backend)
    await tables_db(store).write(lambda c: c.execute(   # SQL both engines take: no parameters
        "INSERT INTO documents (id, name, mime, size, status, text, created_at, updated_at) "
        "VALUES ('d1', 'a.txt', 'text/plain', 3, 'pending', 'abc', now(), now())"))
    before = store.generation
    await store.apply(Changeset(documents=[DocumentUpdate("d1", "failed", error="boom")]))
    row = tables_db(store).read_sync(lambda c: c.execute("SELECT status, error FROM documents").fetchone())
    assert row == ("failed", "boom")
    assert store.generation == before + 1
    await store.close()


def test_a_read_of_a_closed_database_is_refused_not_waited_on(backend_db: tuple[str, Any]) -> None:
    """A read that comes after the store was closed (a base closed when idle, or deleted, while a
    request still held it) is a 503, on both backends; it once waited for a cursor for good."""
    _, db = backend_db
    assert db.read_sync(lambda con: con.execute("SELECT 1").fetchone()[0]) == 1
    db.close()
    outcome: list[BaseException | int] = []

    def read() -> None:
        try:
            outcome.append(db.read_sync(lambda con: con.execute("SELECT 1").fetchone()[0]))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)   # daemon: a read waiting for good fails the test only
    reader.start()
    reader.join(120)
    assert outcome, "the read waited for a cursor of the closed database"
    assert isinstance(outcome[0], StoreUnavailable) and "closed" in outcome[0].message, outcome
