"""Running the console's playground form in-process, with its own CSRF token unless one is given."""

from __future__ import annotations

from typing import Any

import httpx

from tests.matching import must_find

HTMX = {"HX-Request": "true"}


async def csrf(client: httpx.AsyncClient) -> str:
    page = (await client.get("/admin/playground")).text
    return must_find(r'name="csrf" value="([^"]+)"', page).group(1)


async def run(client: httpx.AsyncClient, *, htmx: bool = False, token: str | None = None,
              **form: Any) -> httpx.Response:
    data = {"csrf": token if token is not None else await csrf(client), **form}
    return await client.post("/admin/playground", data=data, headers=HTMX if htmx else {})
