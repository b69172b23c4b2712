"""The console as a whole: its resources (built in the app's lifespan), its routes under /admin,
and how its errors look (a readable message in the page, never a stack trace)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import jinja2
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from admin import (
    error_pages,
    routes_auth,
    routes_cache,
    routes_chats,
    routes_dashboard,
    routes_documents,
    routes_entities,
    routes_kbs,
    routes_keys,
    routes_merge,
    routes_models,
    routes_playground,
    routes_settings,
)
from admin.guard import ConsoleGuard
from admin.kb_links import CarryKnowledgeBase
from admin.rendering import build_environment, installed_dir, static_dir
from proxy.control.pending import PendingAnswers
from proxy.core.settings_sections import AccessSettings
from proxy.guards.auth import Auth

log = logging.getLogger("graphgate.admin")


@dataclass
class Console:
    auth: Auth
    env: jinja2.Environment
    pending: PendingAnswers   # the playground's answers between its two requests

    @staticmethod
    def refusal(scope: Scope, status: int, message: str, *, back: tuple[str, str] | None = None,
                standalone: bool = False) -> Response:
        """An outer guard's refusal of an /admin address, as the console's error page
        (proxy/guards/middleware.py ``console_refusal``: the guards never import the console)."""
        return error_pages.refusal(scope, status, message, back=back, standalone=standalone)


def build_console(settings: AccessSettings, pending: PendingAnswers) -> Console:
    """The console's resources; ``pending`` is where the playground's answers wait (the app opens it
    on the store ``GRAPHGATE_STORE`` names)."""
    return Console(Auth(settings), build_environment(), pending)


def htmx_static() -> Path:
    return installed_dir("js_lib_htmx", "static", "htmx", marker="htmx.min.js")


def error_page(request: Request, status: int, message: str) -> Response:
    """An error as the console shows it (the app's error handlers, for /admin addresses)."""
    return error_pages.error_page(request, status, message)


async def home(request: Request) -> Response:
    return RedirectResponse("/admin/", status_code=308)


def mount() -> list[Route | Mount]:
    routes = [
        *routes_auth.ROUTES, *routes_settings.ROUTES, *routes_dashboard.ROUTES, *routes_documents.ROUTES,
        *routes_entities.ROUTES,
        *routes_merge.ROUTES, *routes_cache.ROUTES, *routes_chats.ROUTES, *routes_playground.ROUTES,
        *routes_kbs.ROUTES, *routes_models.ROUTES, *routes_keys.ROUTES,
        Mount("/static/htmx", app=StaticFiles(directory=htmx_static()), name="htmx"),
        Mount("/static", app=StaticFiles(directory=static_dir()), name="static"),
    ]
    # the guard first; then every page, fragment and redirect keeps the request's knowledge base
    middleware = [Middleware(ConsoleGuard), Middleware(CarryKnowledgeBase)]
    return [Route("/admin", home), Mount("/admin", routes=routes, middleware=middleware)]
