"""Jinja2 rendering for the console: one environment, autoescaping everything (entity names and
document text are untrusted), full pages for browsers and fragments for htmx requests."""

from __future__ import annotations

import base64
import functools
import json
import math
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from admin.flash import flash_message, shown
from admin.kb_links import carried_base, links_for
from proxy.core.errors import BadRequest, GraphGateError
from proxy.guards.access import principal
from proxy.guards.auth import Session
from proxy.state import kb_name

# what every console page carries (the gate adds them; a refusal made before the gate, itself)
PAGE_HEADERS = {
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                               "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
}


class MissingResources(GraphGateError):
    """The installation lacks files the console needs (a broken wheel): start-up stops with this."""


def installed_dir(package: str, *parts: str, marker: str) -> Path:
    """A directory shipped inside an installed package, checked for ``marker``.

    Always the package resources, never a source-tree fallback: a wheel that lacks the files must
    fail here, at start-up, with a sentence that names what is missing."""
    root = resources.files(package).joinpath(*parts)
    if not isinstance(root, Path) or not (root / marker).is_file():
        raise MissingResources(f"this GraphGate installation is incomplete: {marker} is missing from the "
                               f"package {package} ({'/'.join(parts) or '.'} at {root}); reinstall GraphGate "
                               "(in your clone: `pip install --force-reinstall .`)")
    return root


def templates_dir() -> Path:
    """The console's templates, installed as the package ``admin.templates`` (``templates/``)."""
    return installed_dir("admin.templates", marker="base.html")


def static_dir() -> Path:
    return installed_dir("admin.templates", "static", marker="console.css")


def ref(key: str) -> str:
    """An entity or relation key as a URL path segment (keys may hold '/', '?', any character)."""
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def unref(token: str) -> str:
    try:
        raw = token.replace("-", "+").replace("_", "/")
        return base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("malformed reference in the address") from None


def human_bytes(size: int | float | None) -> str:
    if size is None:
        return "–"
    units = ["B", "KB", "MB", "GB", "TB"]
    value, unit = float(size), 0
    while value >= 1000 and unit < len(units) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.0f} {units[unit]}" if unit == 0 else f"{value:.1f} {units[unit]}"


def when(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, datetime):  # stored as naive UTC
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value).replace("T", " ").rstrip("Z").removesuffix("+00:00").split(".")[0] + " UTC"


def build_environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir()), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ref=ref, bytes=human_bytes, when=when, counted=counted, noun=noun,
                       pretty=lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str),
                       pages=lambda total, size: max(1, math.ceil(total / size)))
    env.globals["query"] = lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "")})
    return env


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-history-restore-request") != "true"


def noun(count: Any, singular: str, plural: str | None = None) -> str:
    """The word agreeing with ``count``: "chunk" for 1, "chunks" otherwise (``plural`` when not +s)."""
    return singular if count == 1 else (plural or singular + "s")


def counted(count: Any, singular: str, plural: str | None = None) -> str:
    """``count`` with its word: "1 chunk", "3 chunks", "0 entities"."""
    return f"{count} {noun(count, singular, plural)}"


@dataclass(frozen=True)
class Viewer:
    """Who a page is rendered for: whether they may see the console (its menu, switcher and logout
    are shown to them only) and their session's CSRF token. Known also outside the console's guard
    (an error page of an outer middleware), read from the request's cookie."""
    console: Any   # admin.console.Console, or None before the lifespan built it
    session: Session | None
    signed_in: bool
    csrf: str


def viewer(request: Request) -> Viewer:
    gateway = getattr(request.app.state, "gateway", None)
    console = getattr(gateway, "console", None)
    if console is None:
        return Viewer(None, None, False, "")
    state = request.scope.get("state", {})
    session = state["session"] if "session" in state else console.auth.read(request.scope)
    signed_in = console.auth.allowed(request.scope, session)
    csrf = state.get("csrf") or (console.auth.csrf_token(session) if session is not None else "")
    return Viewer(console, session, signed_in, csrf)


def switchable_bases(request: Request, who: Viewer) -> list[str]:
    """The bases the header's switcher offers: none to whoever may not see the console (the login
    page names no base), only its own to a principal limited to some."""
    gateway = request.app.state.gateway
    if gateway.bases is None or not who.signed_in:
        return []
    return principal(request).visible(gateway.bases.names())


@functools.cache
def fallback_environment() -> jinja2.Environment:
    """The templates for a page rendered before the console's resources exist (an error at start-up)."""
    return build_environment()


@functools.cache
def stylesheet() -> str:
    """The console's stylesheet, for a page that must carry it inline (one its own address refuses)."""
    return (static_dir() / "console.css").read_text(encoding="utf-8")


def render(request: Request, template: str, context: dict[str, Any] | None = None, *, status: int = 200,
           headers: dict[str, str] | None = None, standalone: bool = False) -> HTMLResponse:
    """A page or fragment of the console. ``standalone``: the page carries its stylesheet inline
    and loads no script (its address refuses every other request, e.g. under a Host not allowed)."""
    who = viewer(request)
    console = who.console
    # a page (not a fragment an htmx request swaps in) shows the confirmation an action left for it
    whole_page = not template.startswith("_") and not is_htmx(request)
    flash = flash_message(request, console.auth.key) if console is not None and whole_page else None
    mode = console.auth.mode(request.scope) if console is not None else "password"
    env = console.env if console is not None else fallback_environment()
    page = env.get_template(template).render({
        "request": request,
        # a standalone page is read by whoever asked under a name not allowed: no token of the session
        "csrf": "" if standalone else who.csrf,
        "signed_in": who.signed_in and not standalone,
        # how the console is guarded (its banner, the logout button, the login form): proxy/guards/auth.py
        "console_mode": mode,
        "open_console": mode == "open",
        "path": request.url.path,
        "kb": kb_name(request),
        "kbs": [] if standalone or console is None else switchable_bases(request, who),
        "flash": flash,
        "inline_css": stylesheet() if standalone else None,
        # every console URL the page writes keeps the base it shows (admin/kb_links.py)
        **links_for(carried_base(request) if console is not None else None),
        **(context or {}),
    })
    response = HTMLResponse(page, status_code=status, headers=headers)
    if whole_page:
        shown(request, response)
    return response
