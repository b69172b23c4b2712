"""Who a request is and what it may do: the principal a key (or a console login) stands for.

The guards in front of the routes (proxy/guards/middleware.py) put the request's ``Principal`` in
its scope; the routes ask it with ``require`` (one knowledge base, one action) or ``visible``
(which bases a listing may name). A request no guard marked (no key configured: the gateway is
open, as Ollama is) is the unrestricted admin.

Roles nest: ``read`` (chat, query, listings) < ``write`` (documents, curation) < ``admin`` (the
base itself: its settings, its deletion, its knowledge models; keys and new bases need an admin
key limited to no base). A base the principal may not see is answered as if it did not exist
(404 with the same message an unknown name gets), so a scoped key never learns other bases' names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from proxy.core.errors import Forbidden, NotFound

Role = Literal["read", "write", "admin"]
ROLES: tuple[Role, ...] = ("read", "write", "admin")
PRINCIPAL = "graphgate.principal"   # the request scope's key for the Principal


@dataclass(frozen=True)
class Principal:
    name: str                       # the key's name ("admin" for GRAPHGATE_API_KEY, "console" for a login)
    role: Role
    kbs: frozenset[str] | None      # the bases it may use; None: every base

    @property
    def unrestricted(self) -> bool:
        return self.kbs is None and self.role == "admin"

    def sees(self, kb: str) -> bool:
        return self.kbs is None or kb in self.kbs

    def can(self, kb: str, action: Role) -> bool:
        return self.sees(kb) and ROLES.index(self.role) >= ROLES.index(action)

    def visible(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if self.sees(name)]


ADMIN = Principal("admin", "admin", None)


def principal(request_or_scope: Any) -> Principal:
    """The request's principal (``ADMIN`` when no guard marked it: no key is configured)."""
    scope = getattr(request_or_scope, "scope", request_or_scope)
    found = scope.get(PRINCIPAL)
    return found if isinstance(found, Principal) else ADMIN


def unknown_base(kb: str) -> NotFound:
    return NotFound(f"no knowledge base named {kb!r}")


def require(request_or_scope: Any, kb: str, action: Role) -> Principal:
    """The principal, when it may do ``action`` on base ``kb``: 404 for a base it may not see,
    403 for one it sees with too small a role."""
    who = principal(request_or_scope)
    if not who.sees(kb):
        raise unknown_base(kb)
    if not who.can(kb, action):
        raise Forbidden(f"forbidden: key {who.name!r} may {who.role} knowledge base {kb!r}, not {action}")
    return who


def require_unrestricted(request_or_scope: Any, what: str) -> Principal:
    """The principal, when it is an admin of every base (keys, new bases): 403 otherwise."""
    who = principal(request_or_scope)
    if not who.unrestricted:
        raise Forbidden(f"forbidden: {what} needs an admin key that is not limited to some knowledge bases")
    return who
