"""Who a request is and what it may do: the principal a key (or a console login) stands for.

The guards in front of the routes (proxy/guards/middleware.py) put the request's ``Principal`` in
its scope; the routes ask it with ``require`` (one knowledge base, one action) or ``visible``
(which bases a listing may name). A request no guard marked (no key configured: the gateway is
open, as Ollama is) is the unrestricted admin.

Principals and their roles are the control plane's (proxy/control/principals.py). A base the
principal may not see is answered as if it did not exist (404 with the same message an unknown
name gets), so a scoped key never learns other bases' names.
"""

from __future__ import annotations

from typing import Any

from proxy.control.principals import ADMIN, Principal, Role
from proxy.core.errors import Forbidden, NotFound

PRINCIPAL = "graphgate.principal"   # the request scope's key for the Principal


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
