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
it has answered, and is effective on the next request. A file that cannot be read keeps every
stored key out and the API closed (``in_use``), rather than open it as if no key had been made.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from proxy.core.durable import write_json
from proxy.core.errors import BadRequest, NotFound, ServiceUnavailable
from proxy.guards.access import ROLES, Principal, Role

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
    """The stored keys: loaded once (``open``), changed by ``create`` and ``revoke``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / KEYS_FILE
        self.keys: dict[str, ApiKey] = {}          # by id
        self.by_digest: dict[str, ApiKey] = {}     # by the token's hash: the per-request lookup
        self.broken: str | None = None             # why the file could not be read (then no key works)
        self.lock = anyio.Lock()                   # one change at a time

    @classmethod
    async def open(cls, data_dir: Path) -> KeyStore:
        store = cls(data_dir)
        await anyio.to_thread.run_sync(store.load_sync)
        return store

    # --- the file ---

    def load_sync(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            keys = [ApiKey.from_entry(entry) for entry in raw.get("keys", [])]
        except (FileNotFoundError, NotADirectoryError):   # no key was ever stored (or could be)
            keys = []
        except (OSError, ValueError, AttributeError, TypeError) as exc:   # not JSON, or not of its shape
            self.broken = f"{self.path} cannot be read ({type(exc).__name__}: {exc})"
            log.error("API keys: %s; the stored keys are refused until it is fixed (GRAPHGATE_API_KEY still works)",
                      self.broken)
            keys = []
        self._set(keys)

    def _set(self, keys: Iterable[ApiKey]) -> None:
        keys = list(keys)
        self.keys = {key.id: key for key in keys}
        self.by_digest = {key.sha256: key for key in keys}

    def _write_sync(self, keys: list[ApiKey]) -> None:
        write_json(self.path, {"version": 1, "keys": [key.entry() for key in keys]}, mode=0o600)

    async def _save(self, keys: list[ApiKey]) -> None:
        """Write the file, then (only then) use the new keys."""
        if self.broken:
            raise ServiceUnavailable(f"the API keys cannot be changed: {self.broken}")
        try:
            await anyio.to_thread.run_sync(self._write_sync, keys)
        except OSError as exc:
            raise ServiceUnavailable(f"the API keys could not be saved in {self.path}: {exc.strerror or exc}") from exc
        self._set(keys)

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
        key = self.by_digest.get(wanted)
        if key is None or not hmac.compare_digest(key.sha256, wanted):
            return None
        return key

    def describe(self) -> list[dict[str, Any]]:
        return [key.describe() for key in self.keys.values()]   # in the order they were made

    # --- changes ---

    async def create(self, name: Any, role: Any, kbs: Any, known: Collection[str]) -> tuple[ApiKey, str]:
        """A new key (checked against the bases ``known``) and its token, which is not kept anywhere."""
        name, role, bases = check_key_input(name, role, kbs, known)
        async with self.lock:
            key_id = secrets.token_hex(6)
            while key_id in self.keys:
                key_id = secrets.token_hex(6)
            secret = secrets.token_urlsafe(32)
            token = f"{TOKEN_PREFIX}{key_id}_{secret}"
            key = ApiKey(id=key_id, name=name, role=role, kbs=bases, created_at=_now(), sha256=digest(token),
                         prefix=f"{TOKEN_PREFIX}{key_id}_{secret[:SHOWN_SECRET]}")
            await self._save([*self.keys.values(), key])
        return key, token

    async def forget_base(self, name: str) -> None:
        """Take knowledge base ``name`` out of every key that names it (before the base is deleted):
        a base made later under the same name is not one these keys were given."""
        async with self.lock:
            if not any(key.kbs and name in key.kbs for key in self.keys.values()):
                return
            await self._save([replace(key, kbs=tuple(kb for kb in key.kbs if kb != name))
                              if key.kbs and name in key.kbs else key for key in self.keys.values()])

    async def revoke(self, key_id: str) -> ApiKey:
        async with self.lock:
            key = self.keys.get(key_id)
            if key is None:
                raise NotFound(f"no API key with id {key_id!r}")
            await self._save([k for k in self.keys.values() if k.id != key_id])
        return key


