"""The time the tables record: UTC without a zone (DuckDB's TIMESTAMP columns, PostgreSQL's timestamp)."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
