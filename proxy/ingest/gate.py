"""Whether the pipeline may take documents on, and why not.

Closed (by the knowledge service's embedding guard, proxy/knowledge/embedding_guard.py) while the
store's vectors come from another embedding model than GRAPHGATE_EMBED_MODEL: uploads are still
stored, and wait as pending documents showing the reason, until the store is re-embedded
(``graphgate reindex``) or the setting is put back; then they are processed as usual.
"""

from __future__ import annotations

import anyio


class IngestGate:
    def __init__(self) -> None:
        self.reason: str | None = None   # why documents wait (None: the gate is open)
        self._opened: anyio.Event | None = None   # set when a closed gate opens

    @property
    def closed(self) -> bool:
        return self.reason is not None

    def close(self, reason: str) -> None:
        self.reason = reason

    def open(self) -> None:
        self.reason = None
        if self._opened is not None:
            self._opened.set()
            self._opened = None

    async def wait(self) -> None:
        """Return once the gate is open."""
        while self.reason is not None:
            if self._opened is None:
                self._opened = anyio.Event()
            await self._opened.wait()
