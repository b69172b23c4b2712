"""A confirmation shown once an action has redirected ("Deleted the document “team.txt”."): the
redirect sets a short-lived cookie holding the message, and the next page of the console shows it
at the top and clears the cookie.

The redirect's address stays the page's own (a bookmark or a reload says nothing again). The
message is signed with the console's key, with a salt of its own, so nothing but the console can
make the console say something; a cookie that does not verify, or is older than ``MAX_AGE``, shows
nothing. Only a whole page takes the message: a fragment (the documents table polling every two
seconds, a search typed) leaves it for the page the redirect opens.
"""

from __future__ import annotations

from itsdangerous import BadData, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

COOKIE = "graphgate_flash"
MAX_AGE = 120   # seconds: the redirect is followed at once; a message found later is stale
MAX_CHARS = 500
SALT = "graphgate-console-flash"


def _signer(key: bytes) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(key, salt=SALT)


def _cookie(value: str, max_age: int, secure: bool) -> str:
    parts = [f"{COOKIE}={value}", "Path=/admin", "HttpOnly", "SameSite=Strict", f"Max-Age={max_age}"]
    return "; ".join([*parts, "Secure"] if secure else parts)


def leave(request: Request, response: Response, message: str) -> Response:
    """``response`` (a redirect, or htmx's HX-Redirect) leaving ``message`` for the page it opens."""
    key: bytes = request.app.state.gateway.console.auth.key
    response.headers.append("set-cookie", _cookie(_signer(key).dumps(message[:MAX_CHARS]), MAX_AGE,
                                                  request.url.scheme == "https"))
    return response


def redirect(request: Request, url: str, message: str) -> Response:
    """The 303 after an action, with its confirmation for the page it opens."""
    return leave(request, RedirectResponse(url, status_code=303), message)


def flash_message(request: Request, key: bytes) -> str | None:
    """The confirmation waiting for this request's page, when the console signed it lately."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    try:
        message = _signer(key).loads(token, max_age=MAX_AGE)
    except BadData:
        return None
    return message if isinstance(message, str) else None


def shown(request: Request, response: Response) -> None:
    """The page shows the waiting message (or found a stale one): clear it, so it is said once."""
    if COOKIE in request.cookies:
        response.headers.append("set-cookie", _cookie("", 0, request.url.scheme == "https"))
