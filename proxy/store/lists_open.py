"""Which lists a gateway keeps (``proxy/store/lists.py``): its own module, so that the lists' protocol
and PostgreSQL's implementation of it do not import each other."""

from __future__ import annotations

from proxy.core.settings import Settings
from proxy.store.lists import FileLists, Lists


def open_lists(settings: Settings) -> Lists:
    """The lists of bases, keys and knowledge models of the store ``GRAPHGATE_STORE`` names (no
    connection is made yet): the data directory's files, or a table on the PostgreSQL server."""
    if settings.store == "embedded":
        return FileLists(settings.data_dir)
    from proxy.store.postgres.lists import PgLists  # psycopg: the postgresql extra

    return PgLists(settings.store, settings.data_dir)
