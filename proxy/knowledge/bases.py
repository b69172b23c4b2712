"""Knowledge bases: named, isolated stores under the data directory (issue 20, part 1).

``default`` is the store at the data directory itself, as before bases existed (nothing moves); the
app's lifespan opens it at start-up and keeps it open. Every other base lives in
``<data_dir>/kbs/<name>/`` and is opened on first use:

- Its ``run_knowledge`` is entered and exited by one owner task, started in the registry's task
  group (the service's task group must be exited by the task that entered it). A request takes a
  lease on the base for as long as it runs (``lease``); concurrent first uses open it once.
- A base without a lease for ``GRAPHGATE_KB_IDLE_SECONDS`` is closed (its memory freed); the next
  lease opens it again. All are closed at shutdown.
- The bases share the gateway's Upstream, its LLM and embedding limiters and its metrics.

The list of bases is ``<data_dir>/kbs/registry.json``, written whole by rename (on PostgreSQL, a list
every replica shares, proxy/control/lists.py: a base made, changed or deleted through one replica is
taken into the others' memory by ``refresh``; the replica that deletes a base drops its schema): each base's
created_at, a unique id and its settings overrides (proxy/knowledge/base_settings.py: checked when
set, applied when the base opens; a change to an open base closes it once no request holds it, so
the next request opens it with the new settings). A deletion closes the
base, renames its directory to a tombstone (``kbs/.deleting-<name>.<id>``), drops it from the list,
then removes the tombstone; a deletion killed half-way is finished at the next start (a tombstone
whose id the list still holds is dropped from it first), so a base is there whole or not at all.
The list is written by one writer at a time, each change applied to the newest version of the
list (on one machine: what memory holds), so the list always ends with every change. A list that cannot be read
(torn, edited into the wrong shape) does not stop the gateway: ``default`` serves, the other bases
answer 503 naming the file, and the file is never overwritten (the operator repairs it and restarts).
A base whose pipeline has documents queued or in extraction is not idle: it is closed once the
work is done and the idle time has passed since.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from proxy.control.held import HeldList
from proxy.control.lists import KBS, FileLists, Lists, ListUnavailable, StoredList, Unchanged
from proxy.core.durable import fsync_directory
from proxy.core.errors import BadRequest, Conflict, NotFound, ServiceUnavailable, StorageError
from proxy.core.limiter import PriorityLimiter
from proxy.core.settings import Settings
from proxy.knowledge.base_settings import apply_overrides, effective_values, merge_overrides
from proxy.knowledge.service import Knowledge, run_knowledge
from proxy.monitoring.metrics import Metrics
from proxy.store.backends import drop_base_sync
from proxy.store.lists_open import open_lists
from proxy.store.messages import without_paths
from proxy.upstream.client import Upstream

log = logging.getLogger("graphgate")

DEFAULT = "default"
BASES_DIR = "kbs"
REGISTRY_FILE = "registry.json"
TOMBSTONE = ".deleting-"
NAME = re.compile(r"[a-z0-9_-]{1,64}")


REQUEST_LEASES = "graphgate.kb_leases"   # a request scope's list of lease releases (proxy.state.ReleaseLeases)


async def acquire_for_request(bases: KnowledgeBases, name: str, scope: MutableMapping[str, Any]) -> Knowledge:
    """Base ``name``'s service, leased until the request whose ``scope`` this is has been answered
    (ended at once when nothing in front of the app ends leases)."""
    service, release = await bases.acquire(name)
    leases = scope.get(REQUEST_LEASES)
    if leases is None:
        release()
    else:
        leases.append(release)
    return service


def check_name(name: str) -> str:
    """``name`` when it is a knowledge base's name (lowercase letters, digits, - and _, 1 to 64); 400 otherwise."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadRequest(f"invalid knowledge base name {name!r}: use 1 to 64 lowercase letters, digits, '-' or '_'")
    return name


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Base:
    """One knowledge base: its registry entry and, while open, its service."""

    name: str
    uid: str
    created_at: str
    overrides: dict[str, Any] = field(default_factory=dict)
    knowledge: Knowledge | None = None
    leases: int = 0
    last_used: float = field(default_factory=time.monotonic)
    deleting: bool = False
    stale: bool = False   # its overrides changed while open: closed once no request holds it
    lock: anyio.Lock = field(default_factory=anyio.Lock)   # opening and closing, one at a time
    stop: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    idle: anyio.Event = field(default_factory=anyio.Event)   # set when the last lease ends (a deletion waits)

    def entry(self) -> dict[str, Any]:
        return {"uid": self.uid, "created_at": self.created_at, "settings": self.overrides}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "created_at": self.created_at, "settings": self.overrides,
                "open": self.knowledge is not None}


class KnowledgeBases:
    """The registry of knowledge bases (see the module's docstring). ``run()`` is its lifetime."""

    def __init__(self, settings: Settings, upstream: Upstream, metrics: Metrics | None = None, *,
                 limiter: PriorityLimiter | None = None, embed_limiter: PriorityLimiter | None = None,
                 lists: Lists | None = None) -> None:
        self.settings = settings
        # the list of bases (proxy/control/held.py): a file, or a list replicas share
        self.held = HeldList(lists or FileLists(settings.data_dir), KBS, _registry, Registry({}, None),
                             taken=self._take)
        self.lists = self.held.lists
        self.upstream = upstream
        self.metrics = metrics
        self.limiter = limiter or PriorityLimiter(settings.llm_concurrency)
        self.embed_limiter = embed_limiter or PriorityLimiter(settings.embed_concurrency)
        self.root = settings.data_dir / BASES_DIR
        self.bases: dict[str, Base] = {}
        self.default: Knowledge | None = None      # the app's own store, opened by its lifespan
        self.default_error: str | None = None
        self.default_created_at = _now()
        self.group: TaskGroup | None = None
        self.opened = 0   # how many times a base was opened (the tests count lazy opens)

    # --- the list (a file, or a list replicas share) ---

    @property
    def registry_path(self) -> Path:
        return self.root / REGISTRY_FILE

    @property
    def version(self) -> int:
        return self.held.version   # of the list the bases in memory are (-1: it could not be read)

    @property
    def registry_error(self) -> str | None:
        """Why the list could not be read (bases other than default: 503)."""
        failure = self.held.failure
        if failure is None:
            return None
        remedy = ("read again every few seconds" if self.lists.shared and isinstance(failure, ListUnavailable)
                  else "repair or move it away and restart the gateway")
        return f"the list of knowledge bases cannot be read ({self.held.where}: {failure}); {remedy}"

    def _load_sync(self) -> tuple[dict[str, Any], list[Path]] | None:
        if self.held.load_sync() is not None:
            return None
        entries, tombstones = _without_tombstones(self.root, dict(self.held.value.entries))
        self.default_created_at = self.held.value.default_created_at or self.default_created_at
        return entries, tombstones

    async def _load(self) -> list[Path]:
        """Fill ``bases`` from the list and return the tombstones to finish; a list that cannot be
        read leaves only ``default`` and the reason in ``registry_error`` (the file is left alone)."""
        loaded = await anyio.to_thread.run_sync(self._load_sync)
        if loaded is None:
            log.error("%s", self.registry_error)
            return []
        entries, tombstones = loaded
        self.bases = {name: Base(name=name, uid=e["uid"], created_at=e["created_at"], overrides=dict(e["settings"]))
                      for name, e in entries.items()}
        return tombstones

    async def _finish(self, tombstones: list[Path]) -> None:
        """Remove what killed deletions left (the list first, then the files)."""
        if not tombstones:
            return
        killed = {(name, uid) for name, uid in map(_tombstone_of, tombstones)}

        def forget(entries: dict[str, dict[str, Any]]) -> None:
            for name in [n for n, e in entries.items() if (n, e["uid"]) in killed]:
                del entries[name]

        try:
            await self._change(forget)
            for tomb in tombstones:
                log.info("finishing the deletion of knowledge base %s", tomb.name)
                name = _tombstone_of(tomb)[0]
                if name not in self.bases:   # else a base made since under that name owns the schema now
                    await self._drop_outside(name)
                await anyio.to_thread.run_sync(shutil.rmtree, tomb)
        except (OSError, ServiceUnavailable) as exc:   # a read-only disk, a server away: the next start tries again
            log.warning("could not finish deleting knowledge bases in %s: %s", self.root, exc)

    async def _drop_outside(self, name: str) -> None:
        """A deleted base's PostgreSQL schema (``GRAPHGATE_STORE``), after the list forgot the base and
        before its tombstone goes: a deletion killed in between finishes it at the next start."""
        try:
            await anyio.to_thread.run_sync(drop_base_sync, self.settings.store, name)
        except Exception as exc:   # psycopg's: the base is gone from the list; its tombstone stays for the next start
            raise StorageError(f"knowledge base {name!r} was removed from the list, but its PostgreSQL schema "
                               f"could not be dropped yet ({exc}); it is dropped at the next start") from exc

    def check_list(self) -> None:
        """503 naming the file when the list of bases could not be read at start-up."""
        if self.registry_error is not None:
            raise ServiceUnavailable(self.registry_error)

    async def _change(self, change: Callable[[dict[str, dict[str, Any]]], None]) -> None:
        """Apply ``change`` to the stored list's entries (it edits them in place, or raises) and write
        it whole, then bring the bases in memory to it. One writer at a time; on a shared list the
        change is applied to its newest version, so two replicas' changes both land."""
        self.check_list()   # never over a list that could not be read

        def rewrite(registry: Registry) -> dict[str, Any]:
            if self.lists.shared:   # the newest version, whoever wrote it
                entries, created_at = dict(registry.entries), registry.default_created_at
            else:   # one writer: the list is what memory holds
                entries, created_at = {b.name: b.entry() for b in self.bases.values()}, None
            change(entries)
            return {"version": 1, "default_created_at": created_at or self.default_created_at,
                    "bases": {name: entries[name] for name in sorted(entries)}}

        try:
            await self.held.change(rewrite)
        except OSError as exc:   # a full disk, a lost lists server: nothing was written
            log.error("knowledge bases: cannot write %s: %s", self.held.where, exc)
            raise ServiceUnavailable(f"the list of knowledge bases could not be saved: "
                                     f"{exc.strerror or without_paths(str(exc))}; nothing was changed") from exc

    async def refresh(self, stored: StoredList) -> None:
        """A newer version of the shared list (another replica's change): new bases become known,
        deleted ones are closed and forgotten, changed settings apply from the base's next opening."""
        await self.held.refresh(stored)
        if self.registry_error is not None:
            log.error("%s", self.registry_error)

    async def _take(self, registry: Registry) -> None:
        """Bring ``bases`` to the list just held (a change written, another replica's version)."""
        entries = registry.entries
        self.default_created_at = registry.default_created_at or self.default_created_at
        stale: list[Base] = []
        for name, entry in entries.items():
            if name == DEFAULT or not NAME.fullmatch(name):
                continue
            base = self.bases.get(name)
            if base is not None and base.uid != entry["uid"]:   # deleted and made again elsewhere: another base
                if not base.deleting:   # (a deletion under way here holds its own)
                    self._forget(base, remove_files=False)
                base = None
            if base is None:
                self.bases[name] = Base(name=name, uid=entry["uid"], created_at=entry["created_at"],
                                        overrides=dict(entry["settings"]))
            elif base.overrides != entry["settings"]:
                base.overrides = dict(entry["settings"])
                if base.knowledge is not None:
                    base.stale = True
                    stale.append(base)
        for name, base in list(self.bases.items()):
            if name not in entries:
                del self.bases[name]
                if not base.deleting:   # deleted through another replica (its deletion drops the schema)
                    self._forget(base, remove_files=True)
        for base in stale:
            if base.leases == 0 and self.group is not None:
                self.group.start_soon(self._close_stale, base)

    def _forget(self, base: Base, *, remove_files: bool) -> None:
        """A base another replica deleted: no new leases; closed once the requests holding it end
        (or the shutdown grace has passed), and this replica's files of it removed."""
        base.deleting = True
        if self.group is not None:
            self.group.start_soon(self._close_forgotten, base, remove_files)

    async def _close_forgotten(self, base: Base, remove_files: bool) -> None:
        if base.leases:
            base.idle = anyio.Event()
            with anyio.move_on_after(self.settings.shutdown_grace):
                await base.idle.wait()
        async with base.lock:
            await self._close(base)
        log.info("knowledge base %s was deleted through another replica", base.name)
        directory = self.directory(base.name)
        if remove_files and base.name not in self.bases and directory.exists():
            tomb = self.root / f"{TOMBSTONE}{base.name}.{base.uid}"
            try:
                await anyio.to_thread.run_sync(os.replace, directory, tomb)
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(tomb, ignore_errors=True))
            except OSError as exc:
                log.warning("could not remove %s: %s", directory, exc)
        if self.metrics is not None and base.name not in self.bases:
            self.metrics.forget(base.name)

    def directory(self, name: str) -> Path:
        return self.settings.data_dir if name == DEFAULT else self.root / name

    # --- lifetime ---

    @asynccontextmanager
    async def run(self) -> AsyncIterator[KnowledgeBases]:
        """Load the list (nothing is opened: start-up does not grow with the number of bases), run
        the idle reaper, and close every open base on the way out."""
        await self._finish(await self._load())
        try:
            async with anyio.create_task_group() as group:
                self.group = group
                reaper = anyio.CancelScope()
                group.start_soon(self._reap_idle, reaper)
                try:
                    yield self
                finally:
                    self.group = None   # no more opens
                    reaper.cancel()
                    for base in list(self.bases.values()):
                        base.stop.set()   # each owner task leaves its run_knowledge; the group waits for them
        except BaseExceptionGroup as group:
            # the task group wraps whatever ends the gateway's lifespan (a CLI command's error in an
            # in-process gateway, say): let it out as it was raised (the owner tasks raise nothing)
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    # --- reads ---

    def names(self) -> list[str]:
        return [DEFAULT, *sorted(self.bases)]

    def describe(self) -> list[dict[str, Any]]:
        default = {"name": DEFAULT, "created_at": self.default_created_at, "settings": {},
                   "open": self.default is not None}
        return [default, *(self.bases[n].describe() for n in sorted(self.bases))]

    def detail(self, name: str) -> dict[str, Any]:
        """The base's description, with the values its service runs (or will run) with for every
        setting a base may override."""
        check_name(name)
        if name == DEFAULT:
            return {**self.describe()[0], "effective": effective_values(self.settings)}
        self.check_list()
        base = self.bases.get(name)
        if base is None or base.deleting:
            raise NotFound(f"no knowledge base named {name!r}")
        try:
            return {**base.describe(), "effective": effective_values(self.settings_for(base))}
        except ValueError as exc:   # the list was edited by hand: say so (PATCH with null mends it)
            return {**base.describe(), "effective": None, "error": str(exc)}

    def settings_for(self, base: Base) -> Settings:
        """The settings the base's service is opened with: the gateway's, its directory, its overrides
        (ValueError naming the setting when the list was edited into something invalid)."""
        settings = self.settings.replace(data_dir=self.directory(base.name), inbox_dir=None)
        return apply_overrides(settings, base.overrides)

    def open_services(self) -> list[tuple[str, Knowledge | None]]:
        """The open bases' services by name, ``default`` first (None when its store is unavailable)."""
        return [(DEFAULT, self.default), *((n, self.bases[n].knowledge) for n in sorted(self.bases)
                                           if self.bases[n].knowledge is not None)]

    def open_count(self) -> int:
        return sum(1 for b in self.bases.values() if b.knowledge is not None)

    # --- leases ---

    @asynccontextmanager
    async def lease(self, name: str) -> AsyncIterator[Knowledge]:
        """The base's service, opened if it is not, kept open until the block ends."""
        knowledge, release = await self.acquire(name)
        try:
            yield knowledge
        finally:
            release()

    async def acquire(self, name: str) -> tuple[Knowledge, Any]:
        """The base's service and the function that ends the lease (``lease`` for a block)."""
        if name == DEFAULT:
            if self.default is None:
                raise ServiceUnavailable(f"the knowledge store is unavailable: {self.default_error}")
            return self.default, _nothing
        check_name(name)
        self.check_list()
        base = self.bases.get(name)
        if base is None or base.deleting:
            raise NotFound(f"no knowledge base named {name!r}")
        base.leases += 1
        try:
            if base.knowledge is None:
                async with base.lock:
                    if base.deleting:
                        raise NotFound(f"no knowledge base named {name!r}")
                    if base.knowledge is None:
                        await self._open(base)
        except BaseException:
            self._release(base)
            raise
        assert base.knowledge is not None
        return base.knowledge, lambda: self._release(base)

    def _release(self, base: Base) -> None:
        base.leases -= 1
        base.last_used = time.monotonic()
        if base.leases == 0:
            base.idle.set()
            if base.stale and base.knowledge is not None and self.group is not None:
                self.group.start_soon(self._close_stale, base)

    async def _close_stale(self, base: Base) -> None:
        """Close a base whose settings changed, unless a request took it again meanwhile (it is
        then closed when that one ends)."""
        async with base.lock:
            if base.stale and base.leases == 0:
                await self._close(base)

    # --- opening and closing (under the base's lock) ---

    async def _open(self, base: Base) -> None:
        if self.group is None:
            raise ServiceUnavailable("the gateway is shutting down")
        base.stop, base.closed = anyio.Event(), anyio.Event()
        try:
            settings = self.settings_for(base)
        except ValueError as exc:
            raise ServiceUnavailable(f"knowledge base {base.name!r} cannot be opened: {exc}") from None
        base.stale = False
        with anyio.CancelScope(shield=True):   # a caller that goes away does not leave it half-open
            await self.group.start(self._own, base, settings)
        self.opened += 1

    async def _own(self, base: Base, settings: Settings, *, task_status: TaskStatus[None]) -> None:
        """The owner task: enters the base's run_knowledge, waits to be told to stop, exits it."""
        started = False
        try:
            async with run_knowledge(settings, self.upstream, self.metrics, limiter=self.limiter,
                                     embed_limiter=self.embed_limiter, kb=base.name) as knowledge:
                base.knowledge = knowledge
                started = True
                task_status.started()
                log.info("knowledge base %s opened", base.name)
                await base.stop.wait()
        except Exception:
            if not started:
                raise
            log.exception("knowledge base %s stopped", base.name)   # the others keep serving
        finally:
            base.knowledge = None
            base.closed.set()
            if started:
                log.info("knowledge base %s closed", base.name)

    async def _close(self, base: Base) -> None:
        if base.knowledge is None:
            return
        # gone at once: a request arriving while it closes waits for the lock and opens it again
        # rather than take the service being closed
        base.knowledge = None
        base.stop.set()
        with anyio.CancelScope(shield=True):
            await base.closed.wait()

    async def _reap_idle(self, scope: anyio.CancelScope) -> None:
        with scope:
            await self._reap_forever()

    async def _reap_forever(self) -> None:
        idle = self.settings.kb_idle_seconds
        while True:
            await anyio.sleep(min(max(idle / 4, 0.02), 5.0))
            now = time.monotonic()
            for base in list(self.bases.values()):
                if base.knowledge is not None and _working(base.knowledge):
                    base.last_used = now   # in use by its own work: the idle time counts from its end
                    continue
                if base.knowledge is not None and base.leases == 0 and now - base.last_used >= idle:
                    async with base.lock:
                        if base.knowledge is not None and base.leases == 0 and not _working(base.knowledge) \
                                and time.monotonic() - base.last_used >= idle:
                            await self._close(base)

    # --- creating and deleting ---

    async def create(self, name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        check_name(name)
        self.check_list()
        if name == DEFAULT or name in self.bases:
            raise Conflict(f"a knowledge base named {name!r} already exists")
        if self.directory(name).exists():
            log.warning("knowledge base %s not made: %s exists", name, self.directory(name))
            raise Conflict(f"{BASES_DIR}/{name} exists in the data directory but is no knowledge base of the list: "
                           "move it away first")
        checked = merge_overrides({}, overrides or {}, self.settings)   # 400 naming the setting: nothing made
        entry = {"uid": uuid.uuid4().hex[:12], "created_at": _now(), "settings": checked}

        def add(entries: dict[str, dict[str, Any]]) -> None:
            if name in entries:   # made through another replica meanwhile
                raise Conflict(f"a knowledge base named {name!r} already exists")
            entries[name] = entry

        # listed first, then made: a kill in between leaves a listed base whose directory opens empty
        await self._change(add)
        try:
            await anyio.to_thread.run_sync(lambda: self.directory(name).mkdir(parents=True, exist_ok=True))
        except OSError as exc:   # made: its first use makes the directory (and says why, if it still cannot)
            log.warning("knowledge base %s: its directory could not be made yet: %s", name, exc)
        return self.bases[name].describe()

    async def update(self, name: str, changes: Any) -> dict[str, Any]:
        """Change the base's overrides (a null removes one): all checked first (400 naming the setting,
        nothing changed), then stored. An open base is closed at once if no request holds it, else when
        the last one ends; the next request opens it with the new settings."""
        check_name(name)
        if name == DEFAULT:
            raise Conflict("the default knowledge base runs with the gateway's own settings (GRAPHGATE_*, "
                           "flags): change those and restart; overrides are for the other bases")
        self.check_list()
        base = self.bases.get(name)
        if base is None or base.deleting:
            raise NotFound(f"no knowledge base named {name!r}")
        if merge_overrides(base.overrides, changes, self.settings) == base.overrides:   # 400 naming the setting
            return self.detail(name)
        uid = base.uid

        def change(entries: dict[str, dict[str, Any]]) -> None:
            entry = entries.get(name)
            if entry is None or entry["uid"] != uid:   # deleted through another replica meanwhile
                raise NotFound(f"no knowledge base named {name!r}")
            merged = merge_overrides(entry["settings"], changes, self.settings)
            if merged == entry["settings"]:
                raise Unchanged
            entry["settings"] = merged

        await self._change(change)
        if base.stale and base.knowledge is not None and base.leases == 0:
            await self._close_stale(base)
        return self.detail(name)

    async def delete(self, name: str) -> dict[str, Any]:
        """Close the base (new leases are refused; the ones in flight are given the shutdown grace to
        end), then remove its files: renamed to a tombstone, dropped from the list, removed."""
        check_name(name)
        if name == DEFAULT:
            raise Conflict("the default knowledge base cannot be deleted")
        self.check_list()
        base = self.bases.get(name)
        if base is None or base.deleting:
            raise NotFound(f"no knowledge base named {name!r}")
        base.deleting = True
        tomb = self.root / f"{TOMBSTONE}{name}.{base.uid}"
        try:
            if base.leases:   # no lease is taken from now on: wait for the last to end
                base.idle = anyio.Event()
                with anyio.move_on_after(self.settings.shutdown_grace):
                    await base.idle.wait()
            async with base.lock:
                await self._close(base)
            directory = self.directory(name)
            if directory.exists():
                await anyio.to_thread.run_sync(os.replace, directory, tomb)
                await anyio.to_thread.run_sync(fsync_directory, self.root)
        except BaseException:
            base.deleting = False
            raise
        uid = base.uid

        def drop(entries: dict[str, dict[str, Any]]) -> None:
            if name in entries and entries[name]["uid"] == uid:
                del entries[name]

        try:
            await self._change(drop)
        except ServiceUnavailable:   # the list could not be saved (a full disk): the base is put back as it was
            await self._undelete(base, directory, tomb)
            raise
        if name not in self.bases:   # else another replica made a base of that name meanwhile: its schema now
            await self._drop_outside(name)
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(tomb, ignore_errors=True))
        if self.metrics is not None:
            self.metrics.forget(name)
        return {"deleted": name}

    async def _undelete(self, base: Base, directory: Path, tomb: Path) -> None:
        """A deletion whose list could not be written: the files back in place, the base served again
        (if even the rename back fails, the next start finishes the deletion from the tombstone)."""
        try:
            await anyio.to_thread.run_sync(os.replace, tomb, directory)
        except FileNotFoundError:   # it had no directory yet
            pass
        except OSError as exc:
            log.error("knowledge base %s: could not put %s back (%s); its deletion is finished at the next start",
                      base.name, tomb.name, exc)
            return
        base.deleting = False


def read_registry_sync(root: Path) -> tuple[dict[str, Any], str | None, list[Path]]:
    """The list's entries under ``root`` (``<data_dir>/kbs``), default's created_at, and the tombstones
    left by killed deletions (an entry whose tombstone is there was dropped by its deletion's next
    step: it is dropped here)."""
    entries: dict[str, Any] = {}
    created_at = None
    registry = root / REGISTRY_FILE
    if registry.is_file():
        entries, created_at = _parse_registry(json.loads(registry.read_text(encoding="utf-8")))
    entries, tombstones = _without_tombstones(root, entries)
    return entries, created_at, tombstones


def _tombstone_of(tomb: Path) -> tuple[str, str]:
    """(name, uid) of a deleted base's tombstone ``.deleting-<name>.<uid>``."""
    name, _, uid = tomb.name[len(TOMBSTONE):].rpartition(".")
    return name, uid


def _without_tombstones(root: Path, entries: dict[str, Any]) -> tuple[dict[str, Any], list[Path]]:
    """The valid entries but those whose tombstone is under ``root`` (killed between the rename and
    the list's write), and the tombstones."""
    tombstones = sorted(root.glob(TOMBSTONE + "*")) if root.is_dir() else []
    for tomb in tombstones:
        name, uid = _tombstone_of(tomb)
        if name in entries and entries[name].get("uid") == uid:
            del entries[name]   # killed between the rename and the list's write
    return {n: e for n, e in entries.items() if NAME.fullmatch(n) and n != DEFAULT}, tombstones


@dataclass(frozen=True)
class Registry:
    """The list of bases as stored: each base's entry, and default's creation time."""

    entries: dict[str, dict[str, Any]]
    default_created_at: str | None


def _registry(body: Any) -> Registry:
    """The list's body as a ``Registry``; ValueError when it is no such list."""
    return Registry(*_parse_registry(body))


def _parse_registry(raw: Any) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The list's entries (each with its uid, created_at and settings) and default's created_at;
    ValueError saying what is wrong when the document is no such list (torn, edited by hand)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("bases", {}), dict):
        raise ValueError("not a list of knowledge bases (an object with a \"bases\" object)")
    created_at = raw.get("default_created_at")
    if created_at is not None and not isinstance(created_at, str):
        raise ValueError("default_created_at is not a string")
    entries: dict[str, dict[str, Any]] = {}
    for name, entry in raw.get("bases", {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("uid"), str) \
                or not isinstance(entry.get("created_at"), str) \
                or not isinstance(entry.get("settings") or {}, dict):
            raise ValueError(f"the entry of {name!r} is not an object with a uid, a created_at and settings")
        entries[name] = {"uid": entry["uid"], "created_at": entry["created_at"],
                         "settings": dict(entry.get("settings") or {})}
    return entries, created_at


def base_settings_sync(settings: Settings, name: str) -> Settings:
    """The settings a base's store is opened with, read from its list with no gateway running
    (``graphgate reindex --kb``, ``graphgate mcp`` on its own store): NotFound for a base not listed,
    BadRequest for a bad name, ValueError for overrides edited into something invalid."""
    check_name(name)
    if name == DEFAULT:
        return settings
    if settings.store == "embedded":
        entries, _, _ = read_registry_sync(settings.data_dir / BASES_DIR)
    else:   # the list every replica shares
        document = open_lists(settings).read_sync(KBS)
        entries = _parse_registry(document.body)[0] if document.version else {}
    if name not in entries:
        raise NotFound(f"no knowledge base named {name!r} in {settings.data_dir}")
    base_settings = settings.replace(data_dir=settings.data_dir / BASES_DIR / name, inbox_dir=None)
    return apply_overrides(base_settings, dict(entries[name].get("settings") or {}))


def _working(knowledge: Knowledge) -> bool:
    """The base has documents queued, being extracted or merged, or community summaries being
    written: closing it would throw away LLM calls in flight."""
    return knowledge.pipeline.busy or knowledge.communities.status.state == "running"


def _nothing() -> None:
    return None


