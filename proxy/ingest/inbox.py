"""The optional inbox folder: files that appear (or change) in it are ingested on their own.

Polling, not OS notifications: it works the same on every file system (network shares, Docker
volumes) and a file is taken only once its size and time stopped changing for one interval.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from proxy.core.errors import GraphGateError
from proxy.core.settings_sections import IngestSettings
from proxy.parsing.files import SUPPORTED_TYPES
from proxy.parsing.workers import parse_isolated

if TYPE_CHECKING:
    from proxy.ingest.pipeline import Pipeline

log = logging.getLogger("graphgate.inbox")

INTERVAL = 2.0
INBOX_BASE = "default"   # the one base given an inbox folder (GRAPHGATE_INBOX_DIR)


def scan(folder: Path) -> dict[Path, tuple[int, float]]:
    found = {}
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix.lower() in SUPPORTED_TYPES and not path.name.startswith("."):
            stat = path.stat()
            found[path] = (stat.st_size, stat.st_mtime)
    return found


async def ingest_file(path: Path, pipeline: Pipeline, settings: IngestSettings) -> None:
    try:
        data = await anyio.to_thread.run_sync(path.read_bytes)
        parsed = await parse_isolated(path.name, data, settings, owner=INBOX_BASE)
        document, outcome = await pipeline.submit(parsed)
        log.info("inbox: %s %s (%s)", outcome, path.name, document["id"][:16])
    except GraphGateError as exc:
        log.warning("inbox: %s was not ingested: %s", path.name, exc.message)
    except OSError as exc:
        log.warning("inbox: could not read %s: %s", path, exc)


async def watch_inbox(folder: Path, pipeline: Pipeline, settings: IngestSettings) -> None:
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    taken: dict[Path, tuple[int, float]] = {}
    previous: dict[Path, tuple[int, float]] = {}
    while True:
        current = await anyio.to_thread.run_sync(scan, folder)
        for path, signature in current.items():
            settled = previous.get(path) == signature
            if settled and taken.get(path) != signature:
                taken[path] = signature
                await ingest_file(path, pipeline, settings)
        previous = current
        await anyio.sleep(INTERVAL)
