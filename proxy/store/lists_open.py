"""Where a gateway keeps what several replicas must share besides the knowledge: the lists of bases,
keys and knowledge models (``proxy/control/lists.py``) and the playground's pending answers
(``proxy/control/pending.py``). A module of its own, so that those protocols and their PostgreSQL
implementations do not import each other."""

from __future__ import annotations

from proxy.control.lists import FileLists, Lists
from proxy.control.pending import MemoryPendingAnswers, PendingAnswers
from proxy.core.settings_sections import StoreSettings


def open_lists(settings: StoreSettings) -> Lists:
    """The lists of bases, keys and knowledge models of the store ``GRAPHGATE_STORE`` names (no
    connection is made yet): the data directory's files, or a table on the PostgreSQL server."""
    if settings.store == "embedded":
        return FileLists(settings.data_dir)
    from proxy.store.postgres.lists import PgLists  # psycopg: the postgresql extra

    return PgLists(settings.store, settings.data_dir)


def open_pending(settings: StoreSettings) -> PendingAnswers:
    """In memory, or on the PostgreSQL server ``GRAPHGATE_STORE`` names (no connection made yet)."""
    if settings.store == "embedded":
        return MemoryPendingAnswers()
    from proxy.store.postgres.pending import PgPendingAnswers  # psycopg: the postgresql extra

    return PgPendingAnswers(settings.store)
