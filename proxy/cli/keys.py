"""``graphgate keys create|list|revoke``: the stored API keys (proxy/control/keys.py).

Through the running gateway's /rag/keys when one answers (sending GRAPHGATE_API_KEY, which must
be set: keys are an unrestricted admin's business), so that it uses a new key, or stops taking a
revoked one, at once. With no gateway, on the stored keys directly: the data directory's keys.json
(the gateway reads it when it starts), or on PostgreSQL the list every replica shares.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import anyio.to_thread
import httpx

from proxy.cli.commands import CommandError, console, gateway_url, no_store_message
from proxy.control.keys import KeyStore
from proxy.control.lists import KBS
from proxy.core.data_dir import has_store
from proxy.core.errors import GraphGateError
from proxy.core.settings_sections import ClientSettings
from proxy.knowledge.bases import DEFAULT
from proxy.store.lists_open import open_lists


@contextlib.asynccontextmanager
async def gateway(settings: ClientSettings) -> AsyncIterator[httpx.AsyncClient | None]:
    """The running gateway's API (its /rag/keys answered), or None when no gateway answers."""
    headers = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    url = gateway_url(settings)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, trust_env=False) as client:
        try:
            probe = await client.get("/rag/keys")
        except httpx.ConnectError:
            probe = None
        if probe is not None:
            if probe.status_code in (401, 403):
                raise CommandError(f"the gateway at {url} refused: {_error(probe)}; the keys need its "
                                   "GRAPHGATE_API_KEY (or --api-key), the unrestricted admin key")
            console.print(f"[dim]using the gateway at {url}[/dim]")
            yield client
            return
    yield None


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error"))
    except ValueError:
        return f"HTTP {response.status_code}"


def _answer(response: httpx.Response, status: int) -> Any:
    if response.status_code != status:
        raise CommandError(_error(response))
    return response.json()


async def _store(settings: ClientSettings) -> KeyStore:
    """The stored keys (no gateway answers): the data directory's file, or on PostgreSQL the list
    every replica shares (each running replica takes a change at once)."""
    lists = open_lists(settings)
    if not lists.shared and not has_store(settings.data_dir):
        raise CommandError(no_store_message(settings, gateway_url(settings), can_create=False))
    store = await KeyStore.open(settings.data_dir, lists)
    if store.broken:
        raise CommandError(store.broken)
    console.print(f"[dim]no gateway at {gateway_url(settings)}; working on {store.where} directly "
                  "(a gateway started later reads it)[/dim]")
    return store


def _known_bases(settings: ClientSettings) -> list[str]:
    """The knowledge bases' names, from their list (what the gateway's registry loads)."""
    lists = open_lists(settings)
    try:
        document = lists.read_sync(KBS)
        listed = (document.body or {}).get("bases", {}) if document.version else {}
    except (OSError, ValueError, AttributeError) as exc:
        raise CommandError(f"cannot read the knowledge bases' list {lists.where(KBS)}: {exc}") from None
    return [DEFAULT, *sorted(listed)]


def _show(key: dict[str, Any]) -> str:
    bases = "every base" if key["kbs"] is None else ", ".join(key["kbs"])
    return f"{key['id']}  {key['name']}  {key['role']}  {bases}  {key['prefix']}…  {key['created_at']}"


async def create(settings: ClientSettings, name: str, role: str, kbs: list[str] | None) -> int:
    body = {"name": name, "role": role, "kbs": kbs or None}
    async with gateway(settings) as client:
        if client is not None:
            made = _answer(await client.post("/rag/keys", json=body), 201)
    if client is None:
        store = await _store(settings)
        known = await anyio.to_thread.run_sync(_known_bases, settings)
        try:
            key, token = await store.create(name, role, kbs or None, known)
        except GraphGateError as exc:
            raise CommandError(exc.message) from None
        made = {**key.describe(), "token": token}
    console.print(f"created {_show(made)}\ncopy the key now: it is not shown again", markup=False, highlight=False)
    print(made["token"])
    return 0


async def list_keys(settings: ClientSettings) -> int:
    async with gateway(settings) as client:
        if client is not None:
            keys = _answer(await client.get("/rag/keys"), 200)["keys"]
    if client is None:
        keys = (await _store(settings)).describe()
    if not keys:
        console.print("no API keys are stored")
    for key in keys:
        print(_show(key))
    sys.stdout.flush()
    return 0


async def revoke(settings: ClientSettings, key_id: str) -> int:
    async with gateway(settings) as client:
        if client is not None:
            gone = _answer(await client.delete(f"/rag/keys/{quote(key_id, safe='')}"), 200)
    if client is None:
        store = await _store(settings)
        try:
            key = await store.revoke(key_id)
        except GraphGateError as exc:
            raise CommandError(exc.message) from None
        gone = {"revoked": key.id, "name": key.name}
    console.print(f"revoked key {gone['revoked']} ({gone['name']})", markup=False, highlight=False)
    return 0
