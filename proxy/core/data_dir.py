"""Where the knowledge store lives when GRAPHGATE_DATA_DIR is not set.

The server and every CLI command must find the same store whatever directory they are started
from, so the default is the user's data directory by platform convention (as Ollama keeps
~/.ollama), not the current directory. Releases before this one kept the store in
``./graphgate-data``; such a store is still found and used, with a warning, rather than orphaned.
"""

from __future__ import annotations

import os
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


def default_data_dir(cwd: Path | None = None) -> tuple[Path | None, str | None]:
    """The directory and a warning for the operator when a legacy ``./graphgate-data`` store is used;
    or (None, the reason) when the user data directory holds a store too: which of the two holds
    the documents cannot be told without opening both, and guessing could leave either unused, so
    the operator is asked to say (GRAPHGATE_DATA_DIR) or to move one."""
    preferred = user_data_dir()
    legacy = legacy_store(cwd)
    if legacy is None or legacy == preferred.resolve():
        return preferred, None
    if has_store(preferred):
        return None, (f"there are two knowledge stores: {preferred} (where GraphGate keeps it now) and {legacy} "
                      f"(left by an earlier version in the directory it was started from); set "
                      f"GRAPHGATE_DATA_DIR to the one to use, or remove or move the other")
    return legacy, (f"using the knowledge store in {legacy}, which an earlier GraphGate version kept in the "
                    f"directory it was started from; GraphGate now keeps its store in {preferred}, the same "
                    f"from every directory: move it there (`mkdir -p {preferred.parent} && mv {legacy} "
                    f"{preferred}`) or set GRAPHGATE_DATA_DIR={legacy}")


def hidden_in(text: str, data_dir: Path) -> str:
    """``text`` as a caller may read it: where the data directory is on the server's disk is the
    operator's to know (the log has it whole), so its paths are shown relative to it."""
    for root in dict.fromkeys((str(data_dir), os.path.realpath(data_dir))):
        for separator in dict.fromkeys((os.sep, "/")):
            text = text.replace(root + separator, "")
        text = text.replace(root, "the data directory")
    return text
