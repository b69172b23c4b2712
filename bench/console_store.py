"""The large synthetic store bench/console.py measures: built directly through
``KnowledgeStore.apply`` (the gateway's own commit path), no LLM involved."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH = 10_000
CHUNK_CHARS = 4_800          # ~1,200 tokens, the default chunk size
ZIPF = 0.8                   # degree skew: the top hub of 100k entities gets ~5,000 relations
SYLLABLES = ("ka zor vel mir tan quo rex lun dra pel sif nox bri tal ven osk har ilo mus ger ath "
             "bel cor dun fyr gal hem jor kel lor").split()
COMMON = "mir"               # a substring of ~10-15 % of the names (searches)
# the dozen types, weighted roughly as extraction finds them
TYPES = {"Person": 28, "Organization": 14, "Location": 12, "Concept": 10, "Event": 7, "Artifact": 6,
         "Method": 5, "Content": 5, "Data": 4, "Creature": 3, "NaturalObject": 3, "Other": 3}
KEYWORDS = ("works with", "funds", "located in", "part of", "rivals", "founded", "reports to", "studies",
            "supplies", "attended", "owns", "describes", "depends on", "succeeded", "trained")
FILLER = ("the committee reviewed the figures again before the spring session and the ledger was "
          "closed after a long debate about the harbour and the northern road").split()
MODEL = "llama3.2:3b"


# --- the synthetic knowledge ---------------------------------------------------------------

def word(rng: np.random.Generator, low: int = 2, high: int = 4) -> str:
    return "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), rng.integers(low, high))).capitalize()


def make_name(kind: str, rng: np.random.Generator) -> str:
    w = lambda: word(rng)  # noqa: E731
    match kind:
        case "Person":
            return f"{w()} {w()}"
        case "Organization":
            return f"{w()} {rng.choice(['Industries', 'Institute', 'Group', 'Council', 'Bank', 'Labs'])}"
        case "Location":
            return str(rng.choice([f"Port {w()}", f"{w()} Valley", f"Lake {w()}", f"{w()}ville", f"Mount {w()}"]))
        case "Event":
            return f"{w()} {rng.choice(['Summit', 'Accord', 'Festival', 'Crisis', 'Trial'])} {rng.integers(1900, 2030)}"
        case "Concept":
            return f"{w()} {rng.choice(['theory', 'principle', 'doctrine', 'effect'])}"
        case "Method":
            return f"{w()} {rng.choice(['method', 'process', 'algorithm', 'technique'])}"
        case "Artifact":
            return f"the {w()} {rng.choice(['engine', 'lantern', 'compass', 'codex', 'bridge'])}"
        case "Data":
            return f"{w()} {rng.choice(['index', 'survey', 'census', 'dataset'])} {rng.integers(1, 99)}"
        case "Content":
            return f"\"{w()} and {w()}\""
        case _:
            return f"{w()} {word(rng, 1, 2).lower()}"


def entities(n: int, rng: np.random.Generator) -> tuple[list[str], list[str], list[str]]:
    """(names, name keys, types), unique by name key; the last ~0.3 % are same-name variants of
    earlier organisations ("X Group" / "X Group Inc."), for the merge suggestions."""
    from proxy.extraction.results import name_key

    kinds = list(TYPES)
    weights = np.asarray(list(TYPES.values()), dtype=float)
    drawn = rng.choice(len(kinds), n, p=weights / weights.sum())
    names, keys, types, seen = [], [], [], set()
    variants = max(n // 300, 2)
    for i in range(n - variants):
        while True:
            name = make_name(kinds[drawn[i]], rng)
            key = name_key(name)
            if key not in seen:
                break
        seen.add(key)
        names.append(name)
        keys.append(key)
        types.append(kinds[drawn[i]])
    organisations = [i for i, t in enumerate(types) if t == "Organization"]
    for i in rng.choice(organisations, variants, replace=False):
        name = names[i] + str(rng.choice([" Inc.", " Ltd", " Corporation", " GmbH"]))
        if name_key(name) in seen:
            continue
        seen.add(name_key(name))
        names.append(name)
        keys.append(name_key(name))
        types.append("Organization")
    return names, keys, types


def relations(n_entities: int, per_entity: float, rng: np.random.Generator) -> np.ndarray:
    """Undirected pairs (i < j): one end drawn with Zipf-like weights, the other mostly uniformly."""
    wanted = int(n_entities * per_entity)
    weights = 1.0 / np.arange(1, n_entities + 1) ** ZIPF
    weights /= weights.sum()
    pairs = np.empty((0, 2), dtype=np.int64)
    while len(pairs) < wanted:
        m = int((wanted - len(pairs)) * 1.05) + 16
        a = rng.choice(n_entities, m, p=weights)
        b = rng.integers(0, n_entities, m)
        skewed = rng.random(m) < 0.3
        b[skewed] = rng.choice(n_entities, int(skewed.sum()), p=weights)
        keep = a != b
        new = np.stack([np.minimum(a, b)[keep], np.maximum(a, b)[keep]], axis=1)
        pairs = np.unique(np.concatenate([pairs, new]), axis=0)
    return pairs[rng.permutation(len(pairs))[:wanted]]


class Vectors:
    """Random unit vectors around 500 random centres (clustered, as real embeddings are; uniformly
    random ones in 768 dimensions also make every HNSW insert ~6x slower)."""

    def __init__(self, rng: np.random.Generator, dim: int) -> None:
        self.rng, self.dim = rng, dim
        self.centres = rng.standard_normal((500, dim), dtype=np.float32)

    def __call__(self, n: int) -> np.ndarray:
        v = self.centres[self.rng.integers(0, len(self.centres), n)]
        v += 0.6 * self.rng.standard_normal((n, self.dim), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def sentence(rng: np.random.Generator, length: int = 14) -> str:
    return " ".join(FILLER[i] for i in rng.integers(0, len(FILLER), length)).capitalize() + "."


class Sentences:
    """Filler sentences drawn from a pool (one numpy call per sentence would dominate the build)."""

    def __init__(self, rng: np.random.Generator, size: int = 4096) -> None:
        self.pool = [sentence(rng, int(n)) for n in rng.integers(8, 20, size)]
        self.picks = iter(())
        self.rng = rng

    def __call__(self) -> str:
        try:
            return self.pool[next(self.picks)]
        except StopIteration:
            self.picks = iter(self.rng.integers(0, len(self.pool), 100_000).tolist())
            return self.pool[next(self.picks)]


def build(data: Path, n_entities: int, dim: int, n_chunks: int, n_docs: int, cache_per_kind: int) -> dict[str, int]:
    import anyio

    return anyio.run(_build, data, n_entities, dim, n_chunks, n_docs, cache_per_kind)


async def _build(data: Path, n_entities: int, dim: int, n_chunks: int, n_docs: int,
                 cache_per_kind: int) -> dict[str, int]:
    import pyarrow as pa

    from proxy.extraction.prompts import extraction_messages, extraction_schema
    from proxy.extraction.results import DEFAULT_ENTITY_TYPES
    from proxy.knowledge.traces import Trace
    from proxy.merging.recompute import SUMMARY_SCHEMA, summary_messages
    from proxy.retrieval.keywords import keyword_messages
    from proxy.store import sql_documents as docsql
    from proxy.store.changes import Changeset, ChunkRow, DocumentUpdate, EntityRow, RelationRow, pair_key
    from proxy.store.duckdb import documents as duckdb_documents
    from proxy.store.duckdb.connection import DIALECT, set_meta
    from proxy.store.sql_cache import write_cache
    from proxy.store.sql_dialect import Sql
    from proxy.store.sql_traces import record_traces
    from proxy.store.store import KnowledgeStore, now
    from proxy.upstream.model_calls import CacheEntry
    from tests.invariants import database

    rng = np.random.default_rng(7)
    filler = Sentences(rng)
    unit_vectors = Vectors(rng, dim)
    t0 = time.perf_counter()
    names, keys, types = entities(n_entities, rng)
    n_entities = len(names)
    # hubs are spread over the alphabet: entity i gets popularity rank rank[i]
    rank = rng.permutation(n_entities)
    by_rank = np.argsort(rank)
    pairs = by_rank[relations(n_entities, 2.0, rng)]
    n_rel = len(pairs)
    rel_chunk = rng.integers(0, n_chunks, n_rel)          # the chunk each relation was extracted from
    home_chunk = rng.integers(0, n_chunks, n_entities)    # every entity is mentioned at least once
    chunk_entities: list[list[int]] = [[] for _ in range(n_chunks)]
    chunk_relations: list[list[int]] = [[] for _ in range(n_chunks)]
    entity_chunks: list[list[int]] = [[int(c)] for c in home_chunk]
    for e, c in enumerate(home_chunk):
        chunk_entities[c].append(e)
    for r, ((a, b), c) in enumerate(zip(pairs, rel_chunk, strict=True)):
        chunk_relations[c].append(r)
        for e in (a, b):
            if entity_chunks[e][-1] != c:
                entity_chunks[e].append(int(c))
                chunk_entities[c].append(int(e))
    rel_keywords = [[KEYWORDS[k] for k in rng.choice(len(KEYWORDS), rng.integers(1, 4), replace=False)]
                    for _ in range(n_rel)]
    degree = np.bincount(pairs.ravel(), minlength=n_entities)
    print(f"  generated {n_entities:,} entities, {n_rel:,} relations (max degree {degree.max():,}, "
          f"median {int(np.median(degree))}, {int((degree <= 1).sum()):,} with degree <= 1) in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    def entity_fragment(e: int) -> str:
        return f"{names[e]} is a {types[e].lower()} mentioned alongside {names[(e * 7 + 3) % n_entities]}."

    def relation_description(r: int) -> str:
        a, b = pairs[r]
        return f"{names[a]} {rel_keywords[r][0]} {names[b]}; {filler()}"

    # chunks: the sentences that mention their entities and relations, padded to ~1,200 tokens
    chunk_text, extraction = [], []
    for c in range(n_chunks):
        parts = [relation_description(r) for r in chunk_relations[c]]
        parts += [entity_fragment(e) for e in chunk_entities[c][:8]]
        text = " ".join(parts)
        while len(text) < CHUNK_CHARS:
            text += " " + filler()
        chunk_text.append(f"[{c}] " + text[:CHUNK_CHARS])
        extraction.append(json.dumps({
            "entities": [{"name": names[e], "type": types[e], "description": entity_fragment(e)}
                         for e in dict.fromkeys(chunk_entities[c])],
            "relations": [{"source": names[pairs[r][0]], "target": names[pairs[r][1]], "keywords": rel_keywords[r],
                           "description": relation_description(r), "weight": 1.0} for r in chunk_relations[c]],
        }, ensure_ascii=False, separators=(",", ":")))
    chunk_ids = ["chunk-" + hashlib.sha256(t.encode()).hexdigest() for t in chunk_text]
    # documents: ~n_chunks / n_docs consecutive chunks each (sizes vary), and a few failed ones
    n_failed = max(n_docs // 50, 1)
    cuts = np.sort(rng.choice(np.arange(1, n_chunks), n_docs - n_failed - 1, replace=False))
    spans = list(zip([0, *map(int, cuts)], [*map(int, cuts), n_chunks], strict=True))
    documents: list[dict[str, Any]] = []
    links: list[tuple[str, str, int]] = []
    for d, (start, end) in enumerate(spans):
        text = "\n\n".join(chunk_text[start:end])
        documents.append({"id": "doc-" + hashlib.sha256(text.encode()).hexdigest(), "name": f"doc-{d}.txt",
                          "mime": "text/plain", "size": len(text.encode()), "text": text, "chunks": end - start})
        links += [(documents[-1]["id"], chunk_ids[c], c - start) for c in range(start, end)]
    failed: list[dict[str, Any]] = []
    for d in range(len(spans), len(spans) + n_failed):
        text = f"unreadable upload {d} " + sentence(rng)
        failed.append({"id": "doc-" + hashlib.sha256(text.encode()).hexdigest(), "name": f"doc-{d}.txt",
                       "mime": "text/plain", "size": len(text), "text": text})
    print(f"  generated the text of {n_chunks:,} chunks in {len(documents) + len(failed)} documents "
          f"({time.perf_counter() - t0:.1f} s)", flush=True)

    store = await KnowledgeStore.open(data)
    try:
        def insert_documents(con: Any) -> None:
            sql = Sql(con, DIALECT)
            docsql.insert_documents(sql, [(doc, doc["text"]) for doc in documents + failed])
            for doc in failed:
                duckdb_documents.set_status(sql, doc["id"], "failed",
                                            "the model's extraction for chunk 1 was not valid "
                                            "JSON after 3 tries: no JSON object in the reply")
        await database(store).write(insert_documents)

        stamp = now()
        for start in range(0, n_chunks, BATCH):
            part = range(start, min(start + BATCH, n_chunks))
            vectors = unit_vectors(len(part))
            ids = [chunk_ids[c] for c in part]
            rows = pa.table({"chunk_id": ids, "model": [MODEL] * len(ids),
                             "result": [extraction[c] for c in part],
                             "raw": [json.dumps([extraction[c]], ensure_ascii=False) for c in part],
                             "created_at": [stamp] * len(ids)})

            def record(con: Any, rows: pa.Table = rows) -> None:
                con.register("new_extractions", rows)
                con.execute("INSERT INTO extractions SELECT * FROM new_extractions")
                con.unregister("new_extractions")
            wanted = set(ids)
            last = part.stop == n_chunks
            await store.apply(Changeset(
                chunks_added=[ChunkRow(chunk_ids[c], chunk_text[c], 1200, v)
                              for c, v in zip(part, vectors, strict=True)],
                links_added=[link for link in links if link[1] in wanted],
                documents=[DocumentUpdate(d["id"], "processed", None, d["chunks"], d["chunks"]) for d in documents]
                if last else [],
                also=[record]))
        print(f"  committed chunks and extractions ({time.perf_counter() - t0:.1f} s)", flush=True)

        for start in range(0, n_entities, BATCH):
            part = range(start, min(start + BATCH, n_entities))
            vectors = unit_vectors(len(part))
            rows = []
            for e, v in zip(part, vectors, strict=True):
                fragments = [entity_fragment(e)] + [filler() for _ in range(1 + min(int(degree[e]) // 20, 9))]
                description = " ".join(fragments)
                rows.append(EntityRow(keys[e], names[e], types[e], description,
                                      [chunk_ids[c] for c in entity_chunks[e]],
                                      hashlib.sha256(description.encode()).hexdigest()[:16], v))
            await store.apply(Changeset(entities_upserted=rows))
        print(f"  committed entities ({time.perf_counter() - t0:.1f} s)", flush=True)

        for start in range(0, n_rel, BATCH):
            part = range(start, min(start + BATCH, n_rel))
            vectors = unit_vectors(len(part))
            rows = []
            for r, v in zip(part, vectors, strict=True):
                a, b = keys[pairs[r][0]], keys[pairs[r][1]]
                first, second = sorted((a, b))
                description = relation_description(r)
                rows.append(RelationRow(pair_key(a, b), first, second, rel_keywords[r], description,
                                        float(rng.integers(1, 10)), [chunk_ids[rel_chunk[r]]],
                                        hashlib.sha256(description.encode()).hexdigest()[:16], v))
            await store.apply(Changeset(relations_upserted=rows))
        print(f"  committed relations ({time.perf_counter() - t0:.1f} s)", flush=True)

        # the LLM cache, traces, aliases and dismissed suggestions, in one last commit
        entries = []
        types_list = list(DEFAULT_ENTITY_TYPES)
        for i in range(cache_per_kind):
            c = int(rng.integers(0, n_chunks))
            payload = {"messages": extraction_messages(chunk_text[c], entity_types=types_list, language="English"),
                       "format": extraction_schema()}
            entries.append(CacheEntry("extract", hashlib.sha256(f"x{i}".encode()).hexdigest(), MODEL,
                                      json.dumps(payload, ensure_ascii=False), extraction[c]))
            e = int(by_rank[i % n_entities])
            fragments = [filler() for _ in range(8)]
            payload = {"messages": summary_messages(names[e], fragments, "English"), "format": SUMMARY_SCHEMA}
            entries.append(CacheEntry("summary", hashlib.sha256(f"s{i}".encode()).hexdigest(), MODEL,
                                      json.dumps(payload, ensure_ascii=False),
                                      json.dumps({"summary": " ".join(fragments[:4])})))
            question = f"What does {names[e]} have to do with {names[int(by_rank[(i + 1) % n_entities])]}?"
            payload = {"messages": keyword_messages(question, []), "format": {"type": "object"}}
            entries.append(CacheEntry("keywords", hashlib.sha256(f"k{i}".encode()).hexdigest(), MODEL,
                                      json.dumps(payload, ensure_ascii=False),
                                      json.dumps({"high_level_keywords": [rel_keywords[i % n_rel][0]],
                                                  "low_level_keywords": [names[e]]})))
            body = {"model": MODEL, "messages": [{"role": "user", "content": question}], "stream": False}
            answer = {"model": MODEL, "message": {"role": "assistant", "content": " ".join(fragments)},
                      "done": True, "done_reason": "stop"}
            entries.append(CacheEntry("answer", hashlib.sha256(f"a{i}".encode()).hexdigest(), MODEL,
                                      json.dumps(body), json.dumps(answer)))
        traces = []
        for i in range(300):
            e = int(by_rank[i])
            chosen = [int(x) for x in rng.integers(0, n_entities, 40)]
            traces.append(Trace("ollama" if i % 3 else "openai", MODEL, "mix", f"What is {names[e]} known for?",
                                True, None, {
                                    "budget": {"window": 8192, "window_source": "model", "conversation": 120,
                                               "reserve": 1024, "available": 6800, "total": 6800, "entity": 2000,
                                               "relation": 2000, "raised_num_ctx": None, "reason": None},
                                    "keywords": {"high_level": ["influence", "history"], "low_level": [names[e]],
                                                 "source": "llm"},
                                    "timings": {"keywords": 310.2, "embed": 21.4, "search": 12.9, "context": 8.1,
                                                "total": 352.6},
                                    "entities": [names[x] for x in chosen],
                                    "relations": [[names[pairs[x % n_rel][0]], names[pairs[x % n_rel][1]]]
                                                  for x in chosen],
                                    "chunks": [chunk_ids[x % n_chunks] for x in chosen[:20]],
                                    "tokens": {"entities": 1900, "relations": 1950, "chunks": 2900, "total": 6750}}))
        aliases = [(f"{keys[int(by_rank[i])]} (alias)", keys[int(by_rank[i])]) for i in range(200)]
        dismissed = [pair_key(keys[int(by_rank[i])], keys[int(by_rank[i + 1])]) for i in range(0, 200, 2)]

        def extras(con: Any) -> None:
            write_cache(Sql(con, DIALECT), entries, [])
            for e in entries[::7]:
                con.execute("UPDATE llm_cache SET hits = 3, last_hit_at = ? WHERE kind = ? AND key = ?",
                            [stamp, e.kind, e.key])
            record_traces(Sql(con, DIALECT), traces)
            con.executemany("INSERT INTO aliases VALUES (?, ?, ?)", [[a, t, stamp] for a, t in aliases])
            con.executemany("INSERT INTO dismissed_suggestions VALUES (?, ?)", [[p, stamp] for p in dismissed])
            set_meta(con, "embed_model", "nomic-embed-text")
        await store.apply(Changeset(also=[extras]))
    finally:
        await store.close()
    print(f"  committed cache, traces, aliases; saved ({time.perf_counter() - t0:.1f} s)", flush=True)
    return {"entities": n_entities, "relations": n_rel, "chunks": n_chunks}


# --- the pages ---------------------------------------------------------------------------
