"""Running the console's playground form in-process, with its own CSRF token unless one is given;
reading its result tables; a fake model that writes community summaries."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import httpx

from tests.extractor import KnownFacts
from tests.matching import must_find

HTMX = {"HX-Request": "true"}


async def csrf(client: httpx.AsyncClient) -> str:
    page = (await client.get("/admin/playground")).text
    return must_find(r'name="csrf" value="([^"]+)"', page).group(1)


async def run(client: httpx.AsyncClient, *, htmx: bool = False, token: str | None = None,
              **form: Any) -> httpx.Response:
    data = {"csrf": token if token is not None else await csrf(client), **form}
    return await client.post("/admin/playground", data=data, headers=HTMX if htmx else {})


def rows(page: str, table: str) -> list[list[str]]:
    """A result table's rows, each cell as its text (tags dropped, spaces collapsed)."""
    body = must_find(rf'<table id="{table}">.*?<tbody>(.*?)</tbody>', page, re.DOTALL).group(1)
    return [[" ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split())
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.DOTALL)]


def cells(page: str, table: str) -> dict[str, list[str]]:
    """A result table's rows by their first cell's text."""
    return {row[0]: row for row in rows(page, table)}


def channel_counts(page: str) -> dict[str, dict[str, int]]:
    """The stages panel's channels table as /rag/query's "channels" reads."""
    body = must_find(r'<table id="channels">.*?<tbody>(.*?)</tbody>', page, re.DOTALL).group(1)
    counted = {}
    for name, row in re.findall(r'<tr data-channel="([^"]+)">(.*?)</tr>', body, re.DOTALL):
        numbers = [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', row)]
        counted[html.unescape(name)] = dict(zip(("entities", "relations", "chunks", "communities"), numbers,
                                                strict=True))
    return counted


class Summarising:
    """The fake's structured answers: community summaries whose title and summary carry markup
    (the console must show it as text), everything else as ``facts`` answers it."""

    def __init__(self, facts: KnownFacts) -> None:
        self.facts = facts

    def __call__(self, request: dict[str, Any]) -> str:
        if "title" in ((request.get("format") or {}).get("properties") or {}):
            names = sorted(re.findall(r"^- (.+?) \(", request["messages"][-1]["content"], re.M))
            return json.dumps({"title": f"<b>Around {names[0]}</b>",
                               "summary": f"{' & '.join(names)} belong together.<script>x()</script>"})
        return self.facts(request)
