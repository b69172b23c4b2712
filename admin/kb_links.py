"""The console keeps the knowledge base it shows in its own URLs: ``?kb=<name>``, never a cookie or a
session, so a bookmark or a shared link shows the same base. ``default`` is never written (its
pages keep the URLs they always had); an explicit ``?kb=default`` on a page is redirected away.

No template or route has to remember it. When a request names a base other than ``default`` (its
``kb`` query parameter or its X-GraphGate-KB header, as ``proxy.state.kb_name`` reads them) and
that base exists:
- every page and fragment the console renders (admin/rendering.py ``render``, error pages
  included) gets ``kb=<name>`` on its console URLs (links, form actions, htmx URLs); a GET form
  gets a hidden ``kb`` field instead (a browser drops the query of a GET form's action, and htmx
  appends the form's fields to its URL). A URL or GET form that names a base itself (the
  switcher, a base's "its documents" link) is left alone;
- its redirects (``Location``, ``HX-Redirect``) get it from ``CarryKnowledgeBase``, the pure-ASGI
  middleware of the /admin mount, which also sends ``?kb=default`` to the plain address.

The rewrite reads only markup the templates wrote: every value they interpolate is autoescaped,
so text from documents or users can hold neither a literal ``<``, ``>`` nor ``"``.
"""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.state import kb_name

DEFAULT = "default"
URL_ATTRIBUTES = frozenset({"href", "action", "formaction", "hx-get", "hx-post", "hx-put", "hx-patch",
                            "hx-delete", "data-answer-stream"})
REDIRECT_HEADERS = ("location", "hx-redirect", "hx-location")
NOT_CARRIED = ("/admin/static/",)   # files: the same for every base

_URL_ATTRIBUTE = re.compile(r'(\s)(' + "|".join(sorted(URL_ATTRIBUTES)) + r')="([^"]*)"', re.IGNORECASE)
# a form's start tag (its attributes rewritten, or not, as a whole) or, anywhere else, a URL attribute
_FORM_OR_URL = re.compile(r"(<form\b[^<>]*>)|" + _URL_ATTRIBUTE.pattern, re.IGNORECASE)
_GET_METHOD = re.compile(r'\smethod="get"', re.IGNORECASE)
_ANY_METHOD = re.compile(r"\smethod=", re.IGNORECASE)
_KB_FIELD = re.compile(r'\sname="kb"')
_FORM_END = re.compile(r"</form\s*>", re.IGNORECASE)


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


def carry_in_html(page: str, kb: str) -> str:
    """Every console URL of the page's tags carrying ``kb``; every GET form a hidden ``kb`` field."""
    hidden = f'<input type="hidden" name="kb" value="{html.escape(kb, quote=True)}">'

    def carry(match: re.Match[str]) -> str:
        form = match.group(1)
        if form is None:
            return _carry_attribute(match.group(2), match.group(3), match.group(4), kb)
        if _GET_METHOD.search(form) or not _ANY_METHOD.search(form):
            # its fields make its URL (its action's query is dropped): a hidden field carries the base
            return form if _names_kb_itself(page, match.end()) else form + hidden
        return _URL_ATTRIBUTE.sub(lambda a: _carry_attribute(a.group(1), a.group(2), a.group(3), kb), form)

    return _FORM_OR_URL.sub(carry, page)


def _carry_attribute(space: str, name: str, raw: str, kb: str) -> str:
    url = html.unescape(raw)
    carried = with_kb(url, kb)
    if carried == url:
        return f'{space}{name}="{raw}"'
    return f'{space}{name}="{html.escape(carried, quote=True)}"'


def _names_kb_itself(page: str, start: int) -> bool:
    """Does the form starting at ``start`` hold a field named ``kb`` of its own (the switcher)?"""
    end = _FORM_END.search(page, start)
    return bool(_KB_FIELD.search(page, start, end.start() if end else len(page)))


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
