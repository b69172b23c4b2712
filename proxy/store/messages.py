"""What the store's errors tell a caller: the reason and the file's name, never where the data
directory is on the server's disk (that is for the log, where the operator reads it whole)."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.core.errors import StoreUnavailable

# an absolute path's directories (POSIX, or Windows with its drive), at a word's start: a URL's
# "//host/" is left alone (preceded by ":" or "/")
_DIRECTORIES = re.compile(r"""(?<![\w:/\\.])(?:[A-Za-z]:)?[\\/](?:[^\s"'\\/]+[\\/])+""")


def without_paths(text: str, *directories: Path) -> str:
    """``text`` with every absolute path cut to its last part; ``directories`` (which may hold
    spaces the general rule would stop at) are cut whole first."""
    for directory in sorted((str(d) for d in directories), key=len, reverse=True):
        for separated in (directory + "/", directory + "\\"):
            text = text.replace(separated, "")
        text = text.replace(directory, Path(directory).name)
    return _DIRECTORIES.sub("", text)


def is_disk_full(text: str) -> bool:
    return "No space left" in text or "Disk quota" in text


def opening_error(exc: BaseException, data_dir: Path) -> StoreUnavailable:
    """Why the store at ``data_dir`` cannot be opened, for a caller (507 when the disk is full)."""
    reason = without_paths(f"{type(exc).__name__}: {exc}", data_dir)
    if is_disk_full(reason):
        return StoreUnavailable(f"the disk holding the data directory is full ({reason}); free some space, "
                                "then retry", status=507)
    return StoreUnavailable(reason)
