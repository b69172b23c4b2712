"""Helpers for driving the console in-process: CSRF tokens from pages, form posts, ingestion."""

from __future__ import annotations

import json
import re

import anyio
import httpx

from admin.rendering import ref


def csrf_of(page: str) -> str:
    match = re.search(r'hx-headers=\'(\{[^\']*\})\'', page)
    assert match, "the page carries no CSRF token"
    return json.loads(match.group(1))["X-CSRF-Token"]


async def token(client: httpx.AsyncClient, path: str = "/admin/") -> str:
    response = await client.get(path)
    assert response.status_code == 200, response.text[:300]
    return csrf_of(response.text)


async def post(client: httpx.AsyncClient, path: str, data: dict | list | None = None, *, csrf: bool = True,
               htmx: bool = False, files: list | None = None) -> httpx.Response:
    items = list(data.items()) if isinstance(data, dict) else list(data or [])
    if csrf:
        items.append(("csrf", await token(client)))
    headers = {"HX-Request": "true"} if htmx else {}
    fields: dict[str, list[str]] = {}
    for name, value in items:
        fields.setdefault(name, []).append(value)
    return await client.post(path, data=fields, files=files, headers=headers)


async def upload_texts(client: httpx.AsyncClient, *docs: tuple[str, str]) -> httpx.Response:
    files = [("files", (name, text.encode(), "text/plain")) for name, text in docs]
    return await post(client, "/admin/documents", files=files, htmx=True)


async def settled(client: httpx.AsyncClient) -> None:
    kb = client._transport.app.state.gateway.knowledge  # type: ignore[attr-defined]
    with anyio.fail_after(20):
        await kb.documents.wait_idle()


__all__ = ["csrf_of", "post", "ref", "settled", "token", "upload_texts"]
