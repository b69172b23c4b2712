"""Every error the console shows is one page: the console's layout with the status, the reason and a
way back (the dashboard for whoever may see the console, the login for the others). The app's
error handlers (proxy/app.py), the console's gate (admin/guard.py) and the outer guards' refusals
of /admin addresses (the Host check, CORS, the body bounds: proxy/guards/, through
``Console.refusal``) all answer with it; an htmx request gets the message alone, in the page's
flash area."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from admin.rendering import PAGE_HEADERS, is_htmx, render


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def error_page(request: Request, status: int, message: str, *, headers: Mapping[str, str] | None = None,
               back: tuple[str, str] | None = None, standalone: bool = False) -> Response:
    """The styled page of an error; ``back``: (address, words) of the way back when it is not the
    usual one; ``standalone``: see ``render``. It carries the headers of every console page itself:
    an error raised inside the console reaches the app's handler past the gate that adds them."""
    # the status is said beside the message: not twice ("404 page not found", Ollama's routing text)
    message = message.removeprefix(f"{status} ")
    context = {"status": status, "reason": reason(status), "message": message, "back": back}
    if is_htmx(request) and not standalone:
        response = render(request, "_error.html", context, status=status,
                          headers={**(headers or {}), "hx-retarget": "#flash", "hx-reswap": "innerHTML"})
    else:
        response = render(request, "error.html", context, status=status, headers=dict(headers or {}),
                          standalone=standalone)
    for name, value in PAGE_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def refusal(scope: Scope, status: int, message: str, *, headers: Mapping[str, str] | None = None,
            back: tuple[str, str] | None = None, standalone: bool = False) -> Response:
    """An error page answered by pure-ASGI middleware, from its scope."""
    return error_page(Request(scope), status, message, headers=headers, back=back, standalone=standalone)
