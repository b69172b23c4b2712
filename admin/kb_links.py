"""The console keeps the knowledge base it shows in its own URLs: ``?kb=<name>``, never a cookie or a
session, so a bookmark or a shared link shows the same base. ``default`` is never written (its
pages keep the URLs they always had); an explicit ``?kb=default`` on a page is redirected away.

When a request names a base other than ``default`` (its ``kb`` query parameter or its
X-GraphGate-KB header, as ``proxy.state.kb_name`` reads them) and that base exists:
- the templates write every console URL through ``link`` (links, form actions, htmx URLs), which
  adds ``kb=<name>``, and put ``kb_field()`` in every GET form: a browser drops the query of a GET
  form's action, and htmx appends the form's fields to its URL. A URL or GET form that names a base
  itself (the switcher, a base's "its documents" link) is left alone. ``render`` gives every
  template both (``links_for``); tests/test_console_kbs.py checks that no URL is left out;
- its redirects (``Location``, ``HX-Redirect``) get it from ``CarryKnowledgeBase``, the pure-ASGI
  middleware of the /admin mount, which also sends ``?kb=default`` to the plain address.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from markupsafe import Markup
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.state import kb_name

DEFAULT = "default"
REDIRECT_HEADERS = ("location", "hx-redirect", "hx-location")
NOT_CARRIED = ("/admin/static/",)   # files: the same for every base


def is_console_url(url: str) -> bool:
    """A URL of this console (absolute path under /admin, or a bare ``?query`` on the same page)."""
    if url.startswith("?"):
        return True
    path = urlsplit(url).path
    return (path == "/admin" or path.startswith("/admin/")) and not url.startswith("//") \
        and not path.startswith(NOT_CARRIED) and not urlsplit(url).netloc


def names_a_base(url: str) -> bool:
    return "kb=" in url and any(key == "kb" for key, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True))


def with_kb(url: str, kb: str) -> str:
    """``url`` carrying ``kb=<kb>`` when it is a console URL that names no base yet; ``default`` is
    never written."""
    if kb == DEFAULT or not is_console_url(url) or names_a_base(url):
        return url
    parts = urlsplit(url)
    query = f"{parts.query}&kb={quote(kb, safe='')}" if parts.query else f"kb={quote(kb, safe='')}"
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def links_for(kb: str | None) -> dict[str, Callable[..., Any]]:
    """What the templates write URLs with, for a page of base ``kb`` (None: default, or a page that
    must name no base): ``link(url)`` and ``kb_field()``."""
    def link(url: Any) -> str:
        # a URL a template assembled in a block comes escaped, as Markup: the URL is its text
        text = url.unescape() if isinstance(url, Markup) else str(url)
        return text if kb is None else with_kb(text, kb)

    def kb_field() -> Markup:
        if kb is None:
            return Markup("")
        return Markup('<input type="hidden" name="kb" value="{}">').format(kb)

    return {"link": link, "kb_field": kb_field}


def link_of(request: Request) -> Callable[[str], str]:
    """``link`` for a URL a route writes itself (a graph's node links, drawn in Python)."""
    return links_for(carried_base(request))["link"]


def carried_base(request: Request) -> str | None:
    """The base the request's console URLs must carry: the one it names, unless that is
    ``default`` or no base of that name exists (then its links lead back to default), or the
    request may not see the console (the public login page must not tell which names exist)."""
    kb = kb_name(request)
    if kb == DEFAULT:
        return None
    gateway = request.app.state.gateway
    auth = gateway.console.auth
    if not auth.allowed(request.scope, auth.read(request.scope)):
        return None
    bases = gateway.bases
    return kb if bases is not None and kb in bases.names() else None


def without_default(request: Request) -> str | None:
    """The canonical address of a page asked for with an explicit ``?kb=default``, else None."""
    if request.method not in ("GET", "HEAD") or request.query_params.get("kb") != DEFAULT:
        return None
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "kb"]
    return request.url.path + (f"?{urlencode(rest)}" if rest else "")


class CarryKnowledgeBase:
    """Pure-ASGI middleware for the /admin mount: a request's redirects keep its base, and an
    explicit ``?kb=default`` is sent to the plain address (see the module's docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        canonical = without_default(request)
        if canonical is not None:
            return await RedirectResponse(canonical, status_code=303)(scope, receive, send)
        if kb_name(request) == DEFAULT:
            return await self.app(scope, receive, send)

        async def carrying(message: Message) -> None:
            if message["type"] == "http.response.start":
                # asked now, not before: a base this very request deleted is not carried
                kb = carried_base(request)
                if kb is not None:
                    headers = MutableHeaders(scope=message)
                    for header in REDIRECT_HEADERS:
                        if header in headers:
                            headers[header] = with_kb(headers[header], kb)
            await send(message)

        await self.app(scope, receive, carrying)
