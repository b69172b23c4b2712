"""API keys with scopes (issue 20, part 3): ``<data_dir>/keys.json``, created and revoked at run time.

A key is a token ``gg_<id>_<secret>`` shown once, when it is made; the file keeps its id, name,
role, knowledge bases (a list, or null for every base), creation time, a short prefix to recognise
it by, and the SHA-256 of the token, never the token. SHA-256 (not bcrypt or argon2) because the
secret is 32 random bytes: nobody can guess a 256-bit preimage however fast the hash is, and a slow
hash, which protects guessable passwords, would only cost time on every request.

A request's key is found by its hash in a dict (the lookup's timing depends on the hash, which
says nothing of the token), then compared with ``hmac.compare_digest`` all the same. The file is
written whole (a temporary file, fsynced, renamed over the old one, 0600), off the event loop; the
keys in memory change only once it is written, so a revocation holds across a restart as soon as
it has answered, and is effective on the next request. On PostgreSQL the keys are a list every
replica shares (proxy/control/lists.py), and the other replicas take a change within moments
(``refresh``). A file that cannot be read keeps every
stored key out and the API closed (``in_use``), rather than open it as if no key had been made.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from proxy.control.held import HeldList
from proxy.control.lists import KEYS, FileLists, Lists, StoredList, Unchanged
from proxy.control.principals import ROLES, Principal, Role
from proxy.core.errors import BadRequest, NotFound, ServiceUnavailable

log = logging.getLogger("graphgate")

KEYS_FILE = "keys.json"
TOKEN_PREFIX = "gg_"
SHOWN_SECRET = 4   # characters of the secret kept for display: enough to tell keys apart, 24 of 256 bits


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    role: Role
    kbs: tuple[str, ...] | None   # None: every base
    created_at: str
    sha256: str
    prefix: str

    @property
    def principal(self) -> Principal:
        return Principal(self.name, self.role, None if self.kbs is None else frozenset(self.kbs))

    def describe(self) -> dict[str, Any]:
        """What listings show: everything but the hash."""
        return {"id": self.id, "name": self.name, "role": self.role,
                "kbs": None if self.kbs is None else list(self.kbs), "created_at": self.created_at,
                "prefix": self.prefix}

    def entry(self) -> dict[str, Any]:
        return {**self.describe(), "sha256": self.sha256}

    @classmethod
    def from_entry(cls, raw: Any) -> ApiKey:
        if not isinstance(raw, dict):
            raise ValueError("a key is not an object")
        kbs = raw.get("kbs")
        role = raw.get("role")
        if role not in ROLES or not (kbs is None or isinstance(kbs, list)):
            raise ValueError(f"key {raw.get('id')!r} has a bad role or bases")
        fields: dict[str, str] = {}
        for name in ("id", "name", "created_at", "sha256", "prefix"):
            value = raw.get(name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"key {raw.get('id')!r} lacks its {name}")
            fields[name] = value
        return cls(role=role, kbs=None if kbs is None else tuple(str(k) for k in kbs), **fields)


def check_key_input(name: Any, role: Any, kbs: Any, known: Collection[str]) -> tuple[str, Role, tuple[str, ...] | None]:
    """A new key's name, role and bases, checked (400 naming what is wrong). A base must be one of
    ``known`` (the registry's names, all valid: a malformed name is no base either); the guards do
    not import the knowledge bases' module, which sits above them."""
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 64 or name != name.strip() \
            or any(not ch.isprintable() for ch in name):
        raise BadRequest("name is required: 1 to 64 printable characters, no leading or trailing spaces")
    if role not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if kbs is None:
        return name, role, None
    if not isinstance(kbs, list) or not kbs:
        raise BadRequest("kbs must be a non-empty list of knowledge base names, or null for every base")
    for kb in kbs:
        if not isinstance(kb, str) or kb not in known:
            raise BadRequest(f"no knowledge base named {kb!r} (GET /rag/kbs lists them)")
    return name, role, tuple(sorted(set(kbs)))


class KeyStore:
    """The stored keys: loaded once (``open``), changed by ``create`` and ``revoke``; on a shared
    store (``proxy/control/lists.py``) each replica is handed the others' changes (``refresh``)."""

    def __init__(self, data_dir: Path, lists: Lists | None = None) -> None:
        self.path = data_dir / KEYS_FILE
        self.held = HeldList(lists or FileLists(data_dir), KEYS, _parse, HeldKeys({}, {}))
        self.lists = self.held.lists
        self.where = self.held.where   # the file, or the shared list

    @classmethod
    async def open(cls, data_dir: Path, lists: Lists | None = None) -> KeyStore:
        store = cls(data_dir, lists)
        await anyio.to_thread.run_sync(store.load_sync)
        return store

    # --- the list ---

    def load_sync(self) -> None:
        if self.held.load_sync() is not None:
            log.error("API keys: %s; the stored keys are refused until it is fixed (GRAPHGATE_API_KEY still works)",
                      self.broken)

    async def refresh(self, stored: StoredList) -> None:
        """A newer version of the shared list (another replica's change): used from the next request."""
        await self.held.refresh(stored)

    @property
    def version(self) -> int:
        return self.held.version

    @property
    def broken(self) -> str | None:
        """Why the list could not be read (then no stored key works, and the API stays closed)."""
        failure = self.held.failure
        return None if failure is None else f"{self.where} cannot be read ({type(failure).__name__}: {failure})"

    @property
    def keys(self) -> dict[str, ApiKey]:
        """The keys by id, in the order they were made."""
        return self.held.value.by_id

    async def _change(self, change: Callable[[list[ApiKey]], list[ApiKey]]) -> None:
        """Apply ``change`` to the stored keys and write them, then (only then) use the new keys."""
        if self.broken:
            raise ServiceUnavailable(f"the API keys cannot be changed: {self.broken}")

        def rewrite(held: HeldKeys) -> dict[str, Any]:
            return {"version": 1, "keys": [key.entry() for key in change(list(held.by_id.values()))]}

        try:
            await self.held.change(rewrite)
        except OSError as exc:
            raise ServiceUnavailable(f"the API keys could not be saved in {self.where}: {exc.strerror or exc}") from exc

    # --- reads ---

    @property
    def in_use(self) -> bool:
        """Whether the API needs a key because of stored ones (or of an unreadable key file)."""
        return bool(self.keys) or self.broken is not None

    @property
    def some_limited(self) -> bool:
        """Whether some key is limited to some knowledge bases (then the base names are not for everyone)."""
        return any(key.kbs is not None for key in self.keys.values())

    def verify(self, token: str) -> ApiKey | None:
        """The key this token is, or None."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        wanted = digest(token)
        key = self.held.value.by_digest.get(wanted)
        if key is None or not hmac.compare_digest(key.sha256, wanted):
            return None
        return key

    def describe(self) -> list[dict[str, Any]]:
        return [key.describe() for key in self.keys.values()]   # in the order they were made

    # --- changes ---

    async def create(self, name: Any, role: Any, kbs: Any, known: Collection[str]) -> tuple[ApiKey, str]:
        """A new key (checked against the bases ``known``) and its token, which is not kept anywhere."""
        name, role, bases = check_key_input(name, role, kbs, known)
        made: list[tuple[ApiKey, str]] = []

        def add(keys: list[ApiKey]) -> list[ApiKey]:
            taken = {key.id for key in keys}
            key_id = secrets.token_hex(6)
            while key_id in taken:
                key_id = secrets.token_hex(6)
            secret = secrets.token_urlsafe(32)
            token = f"{TOKEN_PREFIX}{key_id}_{secret}"
            key = ApiKey(id=key_id, name=name, role=role, kbs=bases, created_at=_now(), sha256=digest(token),
                         prefix=f"{TOKEN_PREFIX}{key_id}_{secret[:SHOWN_SECRET]}")
            made[:] = [(key, token)]
            return [*keys, key]

        await self._change(add)
        return made[0]

    async def forget_base(self, name: str) -> None:
        """Take knowledge base ``name`` out of every key that names it (before the base is deleted):
        a base made later under the same name is not one these keys were given."""
        def forget(keys: list[ApiKey]) -> list[ApiKey]:
            if not any(key.kbs and name in key.kbs for key in keys):
                raise Unchanged
            return [replace(key, kbs=tuple(kb for kb in key.kbs if kb != name))
                    if key.kbs and name in key.kbs else key for key in keys]

        if not any(key.kbs and name in key.kbs for key in self.keys.values()) and not self.lists.shared:
            return
        await self._change(forget)

    async def revoke(self, key_id: str) -> ApiKey:
        gone: list[ApiKey] = []

        def remove(keys: list[ApiKey]) -> list[ApiKey]:
            gone[:] = [key for key in keys if key.id == key_id]
            if not gone:
                raise NotFound(f"no API key with id {key_id!r}")
            return [key for key in keys if key.id != key_id]

        if key_id not in self.keys and not self.lists.shared:
            raise NotFound(f"no API key with id {key_id!r}")
        await self._change(remove)
        return gone[0]


@dataclass(frozen=True)
class HeldKeys:
    by_id: dict[str, ApiKey]       # in the order they were made
    by_digest: dict[str, ApiKey]   # by the token's hash: the per-request lookup


def _parse(body: Any) -> HeldKeys:
    """The keys of the list's body; ValueError and friends when it is not of its shape."""
    keys = [ApiKey.from_entry(entry) for entry in body.get("keys", [])]
    return HeldKeys({key.id: key for key in keys}, {key.sha256: key for key in keys})
