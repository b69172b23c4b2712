"""Where the knowledge store lives when GRAPHGATE_DATA_DIR is not set.

The server and every CLI command must find the same store whatever directory they are started
from, so the default is the user's data directory by platform convention (as Ollama keeps
~/.ollama), not the current directory. Releases before this one kept the store in
``./graphgate-data``; such a store is still found and used, with a warning, rather than orphaned.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP_NAME = "graphgate"
LEGACY_DIR = "graphgate-data"  # the old default, relative to the directory GraphGate was started in
DATABASE_FILE = "graphgate.duckdb"  # a directory holding this file is a store


def user_data_dir() -> Path:
    """~/.local/share/graphgate on Linux ($XDG_DATA_HOME honoured), ~/Library/Application
    Support/graphgate on macOS, %LOCALAPPDATA%\\graphgate on Windows."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def has_store(directory: Path) -> bool:
    return (directory / DATABASE_FILE).is_file()


def legacy_store(cwd: Path | None = None) -> Path | None:
    """``./graphgate-data`` when it holds a store an earlier version left there."""
    candidate = (cwd or Path.cwd()) / LEGACY_DIR
    return candidate.resolve() if has_store(candidate) else None


def default_data_dir(cwd: Path | None = None) -> tuple[Path, str | None]:
    """The directory, and a warning for the operator when a legacy ``./graphgate-data`` store is
    involved (used, or passed over because the user data directory already holds a store).

    Upgrading never silently starts over with an empty store, nor silently leaves one behind."""
    preferred = user_data_dir()
    legacy = legacy_store(cwd)
    if legacy is None or legacy == preferred.resolve():
        return preferred, None
    if has_store(preferred):
        return preferred, (f"a knowledge store left by an earlier GraphGate version in {legacy} is not used: "
                           f"GraphGate uses {preferred}; set GRAPHGATE_DATA_DIR={legacy} to use the old one")
    return legacy, (f"using the knowledge store in {legacy}, which an earlier GraphGate version kept in the "
                    f"directory it was started from; GraphGate now keeps its store in {preferred}, the same "
                    f"from every directory: move it there (`mv {legacy} {preferred}`) or set "
                    f"GRAPHGATE_DATA_DIR={legacy}")
