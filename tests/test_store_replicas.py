"""Two replicas of one knowledge base on a real PostgreSQL: each keeps its own in-memory rows and
graph, and replays the other's commits from the change log (woken by LISTEN/NOTIFY)."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import psycopg
import pytest
from psycopg import sql

from proxy.store.backends import postgresql
from proxy.store.changes import Changeset, ChunkRow
from proxy.store.postgres import follow
from proxy.store.store import KnowledgeStore
from tests.invariants import check_open_store, in_memory
from tests.test_store import entity, relation, sample_changes, vec

pytestmark = pytest.mark.anyio


async def two_replicas(tmp_path: Path, dsn: str, schema: str) -> tuple[KnowledgeStore, KnowledgeStore]:
    backend = postgresql(dsn, schema)
    first = await KnowledgeStore.open(tmp_path / "a", backend=backend)
    second = await KnowledgeStore.open(tmp_path / "b", backend=backend)
    return first, second


def linked_sample() -> Changeset:
    """``test_store.sample_changes`` with its chunks linked to a document, as ingestion commits them."""
    changes = sample_changes()
    changes.links_added = [("d1", "c1", 0), ("d1", "c2", 1)]
    return changes


def memory_of(store: KnowledgeStore) -> tuple[set[str], set[tuple[str, str]], set[str]]:
    rows, graph = in_memory(store)
    return graph.names(), graph.edge_pairs(), set(rows.chunk_keys)


async def test_a_commit_through_one_replica_is_replayed_by_the_other(tmp_path: Path, pg_server: str,
                                                                    pg_schema: str) -> None:
    first, second = await two_replicas(tmp_path, pg_server, pg_schema)
    try:
        await first.apply(linked_sample())
        assert second.generation == 0 and memory_of(second) == (set(), set(), set())
        assert await second.replicas.follow() == 1
        assert second.generation == first.generation == 1
        assert memory_of(second) == memory_of(first) == ({"alice", "bob", "carol"},
                                                         {("alice", "bob"), ("bob", "carol")}, {"c1", "c2"})
        # the vectors are the tables': the other replica finds what the first committed
        found = second.search_sync("entities", vec(4), 1)
        assert found and found[0][0] == in_memory(first)[0].entity("bob").key  # type: ignore[union-attr]
        assert abs(found[0][1] - 1.0) < 1e-2
        for store in (first, second):
            check_open_store(store)
    finally:
        await first.close()
        await second.close()


async def test_commits_of_both_replicas_interleave_in_generation_order(tmp_path: Path, pg_server: str,
                                                                      pg_schema: str) -> None:
    """A replica that commits while behind first replays what it missed, then its own commit."""
    first, second = await two_replicas(tmp_path, pg_server, pg_schema)
    try:
        await first.apply(sample_changes())                      # generation 1, not yet seen by second
        await second.apply(Changeset(                             # generation 2: second replays 1 first
            chunks_added=[ChunkRow("c3", "Carol met Dave.", 4, vec(8))],
            entities_upserted=[entity("Dave", 9, ["c3"])],
            relations_upserted=[relation("Carol", "Dave", 10, ["c3"])]))
        assert second.generation == 2
        await first.apply(Changeset(entities_removed=["alice"], relations_removed=[
            relation("Alice", "Bob", 6, []).pair_key]))         # generation 3: first replays 2 first
        assert first.generation == 3
        assert await second.replicas.follow() == 1
        assert memory_of(first) == memory_of(second)
        names, edges, chunks = memory_of(first)
        assert names == {"bob", "carol", "dave"} and edges == {("bob", "carol"), ("carol", "dave")}
        assert chunks == {"c1", "c2", "c3"}
        assert first.vector_count("entities") == second.vector_count("entities") == 3
    finally:
        await first.close()
        await second.close()


async def test_a_replica_follows_the_other_by_notification(tmp_path: Path, pg_server: str, pg_schema: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = await two_replicas(tmp_path, pg_server, pg_schema)
    monkeypatch.setattr(follow, "POLL_SECONDS", 3600.0)   # no poll during the test: only a notification wakes it
    reads = 0
    read_log = second.replicas.follow

    async def counted() -> int:
        nonlocal reads
        reads += 1
        return await read_log()

    monkeypatch.setattr(second.replicas, "follow", counted)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(second.replicas.forever)
            with anyio.fail_after(30):   # listening: it reads the log once, right after its LISTEN
                while not reads:
                    await anyio.sleep(0.01)
            for seed in range(5):
                await first.apply(Changeset(chunks_added=[ChunkRow(f"n{seed}", f"text {seed}", 2, vec(100 + seed))]))
            with anyio.fail_after(30):   # the poll is an hour away: the notifications woke it
                while second.generation != first.generation:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
        assert memory_of(second)[2] == {f"n{seed}" for seed in range(5)}
    finally:
        await first.close()
        await second.close()


async def test_a_replica_started_later_loads_everything_and_continues_the_log(tmp_path: Path, pg_server: str,
                                                                             pg_schema: str) -> None:
    backend = postgresql(pg_server, pg_schema)
    first = await KnowledgeStore.open(tmp_path / "a", backend=backend)
    try:
        await first.apply(sample_changes())
        late = await KnowledgeStore.open(tmp_path / "late", backend=backend)
        try:
            assert late.generation == 1 and memory_of(late) == memory_of(first)
            await first.apply(Changeset(entities_removed=["carol"], relations_removed=[
                relation("Bob", "Carol", 7, []).pair_key]))
            assert await late.replicas.follow() == 1
            assert memory_of(late) == memory_of(first)
            stored = late.vectors_sync("chunks", [in_memory(first)[0].chunk_keys["c1"]])
            assert np.allclose(stored[0], vec(1), atol=1e-3)
        finally:
            await late.close()
    finally:
        await first.close()


async def test_a_replica_behind_a_trimmed_log_reloads_and_applies_its_own_commit_once(
        tmp_path: Path, pg_server: str, pg_schema: str) -> None:
    first, second = await two_replicas(tmp_path, pg_server, pg_schema)
    try:
        await first.apply(linked_sample())                                  # generation 1
        await first.apply(Changeset(chunks_added=[ChunkRow("c9", "more", 1, vec(30))],
                                    links_added=[("d2", "c9", 0)]))         # generation 2
        with psycopg.connect(pg_server, autocommit=True) as con:            # trimmed past second's generation
            con.execute(sql.SQL("DELETE FROM {}.change_log WHERE generation = 1").format(sql.Identifier(pg_schema)))
        await second.apply(Changeset(chunks_added=[ChunkRow("c10", "own", 1, vec(31))],
                                     links_added=[("d3", "c10", 0)]))       # generation 3: a gap before it
        assert second.generation == 3
        assert memory_of(second)[2] == {"c1", "c2", "c9", "c10"}
        assert second.vector_count("chunks") == 4 and second.vector_count("entities") == 3
        check_open_store(second)
        assert await first.replicas.follow() == 1 and memory_of(first) == memory_of(second)
    finally:
        await first.close()
        await second.close()


def test_long_base_names_get_schemas_of_their_own(pg_server: str) -> None:
    """PostgreSQL cuts identifiers at 63 bytes: two 64-character names sharing 60 must not share a schema."""
    from proxy.store.backends import schema_name
    from proxy.store.postgres.connection import PgDatabase, set_meta
    from proxy.store.postgres.schema import drop

    names = ["a" * 60 + "-one", "a" * 60 + "-two"]
    schemas = [schema_name(name) for name in names]
    assert schemas[0] != schemas[1] and all(len(s.encode()) <= 63 for s in schemas)
    assert schema_name("hr") == "kb_hr"
    databases = [PgDatabase(pg_server, schema) for schema in schemas]
    try:
        databases[0].write_sync(set_meta, "marker", "one")
        assert databases[1].read_sync(lambda con: con.execute(
            "SELECT value FROM meta WHERE key = 'marker'").fetchone()) is None
    finally:
        with psycopg.connect(pg_server, autocommit=True) as con:
            for database, schema in zip(databases, schemas, strict=True):
                database.close()
                drop(con, schema)


def test_a_statement_the_server_refuses_is_not_taken_for_the_server_away(pg_server: str, pg_schema: str) -> None:
    """A refusal filed under psycopg's OperationalError (here a query cancelled by its timeout) is an
    error of its own at once, not retried as a server restarting, and health is not told it is away."""
    from proxy.core.errors import StorageError
    from proxy.store.postgres.connection import PgDatabase

    database = PgDatabase(pg_server, pg_schema)
    try:
        with pytest.raises(StorageError) as refused:
            database.read_sync(lambda con: con.execute(
                "SET statement_timeout = 1; SELECT pg_sleep(0.5)").fetchall())
        assert refused.value.status == 500 and "refused" in refused.value.message
        assert database.failure is None
    finally:
        database.close()
