"""The tables: the store's source of truth, by subject. A backend (DuckDB today, PostgreSQL
tomorrow) offers one object per subject; each subject's protocol is its own small file here."""

from __future__ import annotations

from typing import Protocol


class Tables(Protocol):
    """Every subject's tables of one backend (``store.tables``); one attribute per subject."""
