"""The load scenario of bench/load.py, small enough for CI: concurrent chats (half streaming, on both
APIs) through a real ``graphgate serve`` while documents are ingested, against the fake upstream in
its own process with realistic delays. Every request must succeed, every answer arrive whole, and
the ingestion complete (all processed, none failed). The figures (latency, RSS) are the bench's job:
``python bench/load.py`` runs the full size (200 documents, 100 clients).
"""

from __future__ import annotations

import pytest

from bench.load import LoadConfig, run_load


@pytest.mark.slow
def test_concurrent_chats_while_ingesting_all_succeed() -> None:
    config = LoadConfig(documents=12, clients=16, baseline_turns=1, seconds=90, ingest_timeout=90,
                        doc_chars=3000, extract_delay=0.05, keyword_delay=0.03, embed_delay=0.005)
    result = run_load(config)
    assert not result.failures, [(c.kind, c.error) for c in result.failures][:5]
    assert not result.ingestion.upload_errors and not result.ingestion.poll_errors
    assert result.ingestion_complete, result.ingestion.stats
    assert len(result.chats) >= config.clients  # every client chatted at least once under load
    assert result.fake_stats.get("chats augmented", 0) > 0, result.fake_stats  # context injected once docs were in
    assert not [w for w in result.log_warnings if w.startswith(("ERROR", "CRITICAL", "Traceback"))], \
        result.log_warnings
