"""Jinja2 rendering for the console: one environment, autoescaping everything (entity names and
document text are untrusted), full pages for browsers and fragments for htmx requests."""

from __future__ import annotations

import base64
import json
import math
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from admin.kb_links import carried_base, carry_in_html
from proxy.core.errors import BadRequest, GraphGateError
from proxy.guards.access import principal
from proxy.state import kb_name


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
    env.filters.update(ref=ref, bytes=human_bytes, when=when,
                       pretty=lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str),
                       pages=lambda total, size: max(1, math.ceil(total / size)))
    env.globals["query"] = lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "")})
    return env


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-history-restore-request") != "true"


def switchable_bases(request: Request) -> list[str]:
    """The bases the header's switcher offers: none to whoever may not see the console (the login
    page names no base), only its own to a principal limited to some."""
    gateway = request.app.state.gateway
    state = request.scope.get("state", {})
    if gateway.bases is None or not gateway.console.auth.allowed(request.scope, state.get("session")):
        return []
    return principal(request).visible(gateway.bases.names())


def render(request: Request, template: str, context: dict[str, Any] | None = None, *, status: int = 200,
           headers: dict[str, str] | None = None) -> HTMLResponse:
    console = request.app.state.gateway.console
    state = request.scope.get("state", {})
    page = console.env.get_template(template).render({
        "request": request,
        "csrf": state.get("csrf", ""),
        # how the console is guarded (its banner, the logout button, the login form): proxy/guards/auth.py
        "console_mode": console.auth.mode(request.scope),
        "open_console": console.auth.mode(request.scope) == "open",
        "path": request.url.path,
        "kb": kb_name(request),
        "kbs": switchable_bases(request),
        **(context or {}),
    })
    kb = carried_base(request)
    if kb is not None:   # every console URL of the page keeps the base it shows
        page = carry_in_html(page, kb)
    return HTMLResponse(page, status_code=status, headers=headers)
