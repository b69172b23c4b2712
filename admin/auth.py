"""Who may use the console: sessions, the password, loopback-only mode and CSRF tokens.

A browser gets one signed cookie (HttpOnly, SameSite=Strict) holding a random session id and
whether it has logged in. Every state-changing console request carries a CSRF token derived
from that id (a hidden form field, or the X-CSRF-Token header htmx sends). With no password set
the console answers loopback clients only; with one, a login (or the API key) is required.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import Headers
from starlette.types import Scope

from proxy.hosts import request_host_allowed
from proxy.settings import Settings

log = logging.getLogger("graphgate.admin")

COOKIE = "graphgate_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Session:
    sid: str
    authenticated: bool


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
    def __init__(self, settings: Settings) -> None:
        self.password = settings.admin_password
        self.api_key = settings.api_key
        self.allowed_hosts = settings.allowed_hosts
        self.max_age = int(settings.session_hours * 3600)
        # the password is part of the key: changing it ends every session
        key = hmac.new(_secret(settings.data_dir), (self.password or "").encode(), hashlib.sha256).digest()
        self.key = key
        self.serializer = URLSafeTimedSerializer(key, salt="graphgate-console")

    # --- sessions ---

    def read(self, scope: Scope) -> Session | None:
        raw = _cookie(Headers(scope=scope), COOKIE)
        if not raw:
            return None
        try:
            data = self.serializer.loads(raw, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("sid"), str):
            return None
        return Session(data["sid"], bool(data.get("auth")))

    def issue(self, authenticated: bool) -> tuple[Session, str]:
        session = Session(secrets.token_urlsafe(24), authenticated)
        return session, self.serializer.dumps({"sid": session.sid, "auth": authenticated})

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
        if self.password is None:
            # a loopback client under an allowed Host only: a rebinding page in a local browser is
            # a loopback client too, whatever the bind (proxy/hosts.py)
            return (is_loopback(scope) and request_host_allowed(scope, self.allowed_hosts)) or self.api_key_ok(scope)
        return (session is not None and session.authenticated) or self.api_key_ok(scope)

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
