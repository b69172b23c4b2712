"""Console sessions ended by a logout (``Revocations``): the one part of the console's login state
that must outlive a request, and, with several replicas, be shared by all of them."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import anyio.to_thread

from proxy.control.held import HeldList
from proxy.control.lists import SESSIONS, Lists, StoredList, Unchanged

log = logging.getLogger("graphgate.admin")


REVOKED_FILE = "revoked-sessions"


class Revocations:
    """Session ids ended by a logout, each until its cookie would have expired anyway.

    A signed cookie cannot be taken back from the browser, so the server remembers which ids it
    no longer honours: in memory (checked on every request) and in a 0600 file beside the session
    key, one ``<sid> <unix expiry>`` line per logout, so a revoked cookie stays revoked across a
    restart. Only logouts write (a login needs no state), and entries age out with the longest
    a cookie lives, so the file stays small; expired lines are dropped when it is loaded. A torn
    last line (a crash mid-append) is skipped. When the directory cannot be written the ids are
    kept in memory only (the secret then usually is too, which ends every session at restart).
    With several replicas on PostgreSQL the logouts are also kept in a list they share (``share``),
    so a logout through one is honoured by all of them at once."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / REVOKED_FILE
        self.ids: dict[str, float] = {}
        self.shared: HeldList[dict[str, float]] | None = None   # the replicas' list, once ``share`` was called
        self._load()

    def _load(self) -> None:
        now = time.time()
        try:
            lines = self.path.read_text("ascii", errors="replace").splitlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read the revoked sessions in %s (%s)", self.path, exc)
            return
        for line in lines:
            sid, _, expiry = line.partition(" ")
            try:
                until = float(expiry)
            except ValueError:
                continue
            if sid and until > now:
                self.ids[sid] = max(until, self.ids.get(sid, 0.0))
        if len(self.ids) < len(lines):  # some expired (or torn): write back the live ones
            try:
                self._rewrite()
            except OSError as exc:
                log.warning("cannot rewrite %s (%s)", self.path, exc)

    def _rewrite(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.writelines(f"{sid} {until:.0f}\n" for sid, until in self.ids.items())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)

    def _append(self, sid: str, until: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="ascii") as out:
            out.write(f"{sid} {until:.0f}\n")
            out.flush()
            os.fsync(out.fileno())

    def __contains__(self, sid: str) -> bool:
        until = self.ids.get(sid)
        if until is None:
            return False
        if until <= time.time():
            del self.ids[sid]
            return False
        return True

    async def revoke(self, sid: str, until: float) -> None:
        self.ids[sid] = until  # at once, before any await: no request slips in meanwhile
        try:
            await anyio.to_thread.run_sync(self._append, sid, until)
        except OSError as exc:
            log.warning("cannot record a logout in %s (%s): that session ends at restart only if the "
                        "session key is not kept", self.path, exc)
        if self.shared is not None:
            await self._merge_into_shared({sid: until})

    # --- several replicas (GRAPHGATE_STORE on PostgreSQL): one list of logouts for all ---

    async def share(self, lists: Lists) -> None:
        """Keep the logouts in the list every replica shares (proxy/control/lists.py) from now on, as
        well as in the file: a logout made through one replica is honoured by the others at once.
        This replica's live ones are added to it."""
        self.shared = HeldList(lists, SESSIONS, _live_sessions, {}, taken=self._revoke_all)
        await self._merge_into_shared(dict(self.ids))

    @property
    def version(self) -> int:
        """Of the shared list last merged in."""
        return 0 if self.shared is None else self.shared.version

    async def _merge_into_shared(self, ids: dict[str, float]) -> None:
        assert self.shared is not None

        def merge(live: dict[str, float]) -> dict[str, Any]:
            if all(live.get(sid, 0.0) >= until for sid, until in ids.items()):
                raise Unchanged   # nothing to add (no write at start-up when there was no logout)
            for sid, until in ids.items():
                live[sid] = max(until, live.get(sid, 0.0))
            return {"sessions": live}   # the expired ones dropped

        try:
            await self.shared.change(merge)
        except OSError as exc:
            log.warning("cannot record logouts in %s (%s): the other replicas honour them after their "
                        "next restart, or the next logout recorded", self.shared.where, exc)

    async def refresh(self, stored: StoredList) -> None:
        """The shared list's logouts (another replica's): revoked here too."""
        if self.shared is not None:
            await self.shared.refresh(stored)

    async def _revoke_all(self, live: dict[str, float]) -> None:
        for sid, until in live.items():
            self.ids[sid] = max(until, self.ids.get(sid, 0.0))


def _live_sessions(body: Any) -> dict[str, float]:
    """The shared list's session ids whose cookies have not expired yet (anything else is skipped)."""
    sessions = body.get("sessions") if isinstance(body, dict) else None
    now = time.time()
    live = {}
    for sid, until in (sessions or {}).items() if isinstance(sessions, dict) else ():
        if isinstance(sid, str) and isinstance(until, int | float) and until > now:
            live[sid] = float(until)
    return live
