"""Who may use the console: sessions, the password, loopback-only mode, admin keys and CSRF tokens.

A browser gets one signed cookie (HttpOnly, SameSite=Strict) holding a random session id and
whether it has logged in. Every state-changing console request carries a CSRF token derived
from that id (a hidden form field, or the X-CSRF-Token header htmx sends).

How the console is guarded (``Auth.mode``), never more loosely than the API:

- ``password``: GRAPHGATE_ADMIN_PASSWORD is set: a login with it, or GRAPHGATE_API_KEY in the
  Authorization header (scripts).
- ``open``: no password and no API key in use (the API is open to all too): loopback clients
  only, under an allowed Host name.
- ``key``: no password, but a key is in use (GRAPHGATE_API_KEY, or any stored key: the API is
  closed): an admin key of every base (GRAPHGATE_API_KEY, or a stored ``admin`` key limited to no
  base), in the Authorization header or through the login page. Loopback alone is no credential
  then: a reverse proxy or an SSH tunnel on the same host makes every remote client loopback.
  Such a login lasts as long as its key: the cookie names the key, which is checked on every
  request, so a revoked key ends its sessions at once.

A logout revokes its session id server-side (``Revocations``); a password change changes the
signing key (``Auth.__init__``), which ends every session at once.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import Headers
from starlette.types import Scope

from proxy.control.sessions import Revocations
from proxy.core.hosts import request_host_allowed
from proxy.core.settings_sections import AccessSettings
from proxy.guards.login_limit import LoginLimiter
from proxy.guards.middleware import KeyCheck

log = logging.getLogger("graphgate.admin")

COOKIE = "graphgate_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Session:
    sid: str
    authenticated: bool


ConsoleMode = Literal["password", "open", "key"]


def _secret(data_dir: Path) -> bytes:
    """A random signing secret kept beside the store (0600), so logins survive a restart; in
    memory only when the directory cannot be written (logins then last until the restart)."""
    path = data_dir / "session.key"
    try:
        if path.exists():
            return path.read_bytes()
        data_dir.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secret)
        return secret
    except OSError as exc:
        log.warning("cannot keep the session secret in %s (%s): logins end at restart", data_dir, exc)
        return secrets.token_bytes(32)


def is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


class Auth:
    def __init__(self, settings: AccessSettings) -> None:
        self.password = settings.admin_password
        self.api_key = settings.api_key
        self.allowed_hosts = settings.allowed_hosts
        self.max_age = int(settings.session_hours * 3600)
        # the password is part of the key: changing it ends every session
        shared = settings.session_secret.encode() if settings.session_secret else None   # several replicas
        key = hmac.new(shared or _secret(settings.data_dir), (self.password or "").encode(), hashlib.sha256).digest()
        self.key = key
        self.serializer = URLSafeTimedSerializer(key, salt="graphgate-console")
        self.revoked = Revocations(settings.data_dir)
        self.logins = LoginLimiter()
        self.keys = KeyCheck(settings.api_key)
        # what a login with GRAPHGATE_API_KEY keeps in its cookie: keyed, so the cookie (signed, not
        # encrypted) says nothing of the key, and a changed key ends those sessions
        self.admin_tag = ("admin:" + hmac.new(key, b"admin-key:" + self.api_key.encode(), hashlib.sha256)
                          .hexdigest()[:32]) if self.api_key else None

    # --- how the console is guarded ---

    def mode(self, scope: Scope) -> ConsoleMode:
        """``password``, ``open`` (no password, no API key in use) or ``key`` (no password, a key in use)."""
        if self.password is not None:
            return "password"
        return "key" if self.keys.in_use(scope) else "open"

    def admin_bearer(self, scope: Scope) -> bool:
        """Whether the Authorization header carries an admin key the console takes: GRAPHGATE_API_KEY;
        without a password, also a stored admin key limited to no base (with one, the password is the
        console's credential and stored keys are the API's only)."""
        if self.password is not None:
            return self.api_key_ok(scope)
        who = self.keys.principal(scope)
        return who is not None and who.unrestricted

    def key_login(self, scope: Scope, given: str) -> str | None:
        """What a login with key ``given`` keeps in its cookie (``admin:...`` for GRAPHGATE_API_KEY,
        ``key:<id>`` for a stored admin key of every base), or None when it is no such key."""
        if self.api_key and self.admin_tag and hmac.compare_digest(given.encode(), self.api_key.encode()):
            return self.admin_tag
        store = self.keys.store(scope)
        key = store.verify(given) if store is not None else None
        return f"key:{key.id}" if key is not None and key.principal.unrestricted else None

    def _key_holds(self, scope: Scope, tag: str) -> bool:
        """Whether the key a login was made with still opens the console (not revoked, not changed)."""
        if self.password is not None:
            return False
        if tag.startswith("admin:"):
            return self.admin_tag is not None and hmac.compare_digest(tag, self.admin_tag)
        store = self.keys.store(scope)
        key = store.keys.get(tag.removeprefix("key:")) if store is not None and tag.startswith("key:") else None
        return key is not None and key.principal.unrestricted

    # --- sessions ---

    def read(self, scope: Scope) -> Session | None:
        raw = _cookie(Headers(scope=scope), COOKIE)
        if not raw:
            return None
        try:
            data = self.serializer.loads(raw, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("sid"), str) or data["sid"] in self.revoked:
            return None
        tag = data.get("key")
        if isinstance(tag, str):   # a login with a key: as good as the key, now
            authenticated = bool(data.get("auth")) and self._key_holds(scope, tag)
        else:   # a login with the password
            authenticated = bool(data.get("auth")) and self.password is not None
        return Session(data["sid"], authenticated)

    async def revoke(self, session: Session | None) -> None:
        """End a logged-in session for good (logout): its cookie and CSRF token stop working here
        and after a restart. An anonymous session grants nothing a fresh cookie would not."""
        if session is not None and session.authenticated:
            await self.revoked.revoke(session.sid, time.time() + self.max_age + 60)

    def issue(self, authenticated: bool, key: str | None = None) -> tuple[Session, str]:
        """A new session; ``key``: the login was made with that key (``key_login``), not the password."""
        session = Session(secrets.token_urlsafe(24), authenticated)
        data: dict[str, Any] = {"sid": session.sid, "auth": authenticated}
        if key is not None:
            data["key"] = key
        return session, self.serializer.dumps(data)

    def cookie_header(self, value: str, *, secure: bool) -> str:
        parts = [f"{COOKIE}={value}", "Path=/", "HttpOnly", "SameSite=Strict", f"Max-Age={self.max_age}"]
        if secure:
            parts.append("Secure")
        return "; ".join(parts)

    @staticmethod
    def clear_cookie_header() -> str:
        return f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"

    def password_ok(self, given: str) -> bool:
        return self.password is not None and hmac.compare_digest(given.encode(), self.password.encode())

    def api_key_ok(self, scope: Scope) -> bool:
        if not self.api_key:
            return False
        given = Headers(scope=scope).get("authorization", "").encode()
        return hmac.compare_digest(given, f"Bearer {self.api_key}".encode())

    # --- who is asking ---

    def allowed(self, scope: Scope, session: Session | None) -> bool:
        """May this request see the console at all?"""
        if self.mode(scope) == "open":
            # a loopback client under an allowed Host only: a rebinding page in a local browser is
            # a loopback client too, whatever the bind (proxy/hosts.py)
            return is_loopback(scope) and request_host_allowed(scope, self.allowed_hosts)
        return (session is not None and session.authenticated) or self.admin_bearer(scope)

    # --- CSRF ---

    def csrf_token(self, session: Session) -> str:
        return hmac.new(self.key, f"csrf:{session.sid}".encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session | None, given: str | None) -> bool:
        return session is not None and bool(given) and hmac.compare_digest(self.csrf_token(session), given or "")


def _cookie(headers: Headers, name: str) -> str | None:
    for header in headers.getlist("cookie"):
        for part in header.split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
    return None
