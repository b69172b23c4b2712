"""Before ``graphgate serve`` starts anything: its store and its port are its own, or one sentence
says who has them (a second gateway on a store in use printed DuckDB's lock error, then
"Application startup complete", then uvicorn's "address already in use").

A running gateway leaves a note in its data directory (``serving.json``: its process and address),
so that whoever finds the store held can say where that gateway answers; any other holder (``graphgate
reindex``, an in-process ``graphgate ingest``) is named by its command line when the system shows it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from proxy.core.hosts import local_url
from proxy.core.settings_sections import ClientSettings, StoreSettings
from proxy.store.preflight import store_lock_holder

SERVING_FILE = "serving.json"
PROBE_SECONDS = 2.0   # asking whoever holds the port what it is


def store_in_use(settings: StoreSettings) -> str | None:
    """Who holds the embedded store, as a sentence; None when it is free (or not embedded)."""
    if settings.store != "embedded":
        return None   # PostgreSQL: replicas share a store by design
    pid = store_lock_holder(settings.data_dir)
    return None if pid is None else holder_sentence(settings.data_dir, pid)


def holder_sentence(data_dir: Path, pid: int) -> str:
    note = read_note(data_dir)
    where = f"the store at {data_dir}"
    if pid and note is not None and note.get("pid") == pid and isinstance(note.get("url"), str):
        return f"GraphGate is already running on {note['url']} with this store ({data_dir}, process {pid})"
    command = command_of(pid)
    if command == "graphgate serve":
        return f"GraphGate is already running with this store ({data_dir}, process {pid})"
    if command is not None:
        return f"`{command}` (process {pid}) is using {where}: wait for it to finish, or stop it"
    who = f"another process ({pid}{': ' + name if (name := process_name(pid)) else ''})" if pid else "another process"
    return f"{who} is using {where}; an embedded store is opened by one process at a time"


def command_of(pid: int) -> str | None:
    """``graphgate <command>`` when process ``pid`` runs one (``graphgate reindex``, ``python -m proxy
    serve``), else None; None too where the system does not show command lines (no /proc)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if pid else []
    except OSError:
        return None
    words = [part.decode(errors="replace") for part in argv if part]
    for i, word in enumerate(words):
        launched = os.path.basename(word) == "graphgate" or (word == "proxy" and i and words[i - 1] == "-m")
        if launched:
            command = next((w for w in words[i + 1:] if not w.startswith("-")), None)
            return f"graphgate {command}" if command else "graphgate"
    return None


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


def read_note(data_dir: Path) -> dict[str, Any] | None:
    try:
        note = json.loads((data_dir / SERVING_FILE).read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


@contextlib.contextmanager
def serving_note(settings: ClientSettings) -> Iterator[Callable[[], None]]:
    """The note saying this process serves the embedded store at its address, while it does; what
    it gives removes it (uvicorn ends the process by the signal that stopped it, after its own
    shutdown, so the server calls it then: a ``finally`` here would not run)."""
    path = settings.data_dir / SERVING_FILE

    def remove() -> None:
        note = read_note(settings.data_dir)
        if note is not None and note.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                path.unlink()

    if settings.store == "embedded":
        try:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{SERVING_FILE}.{os.getpid()}")
            temporary.write_text(json.dumps({"pid": os.getpid(), "url": local_url(settings.host, settings.port)}))
            temporary.replace(path)
        except OSError:
            pass   # a read-only directory: the store's own opening says so; the note only helps a second start
    try:
        yield remove
    finally:
        remove()


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host``:``port`` (every address the name has, as asyncio binds them),
    bound before the gateway starts: the port is this process's, or OSError says why not."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def port_problem(host: str, port: int, exc: OSError) -> str:
    """Why the gateway cannot listen on ``host``:``port``, and what to do, in one sentence."""
    if exc.errno != errno.EADDRINUSE:
        return f"cannot listen on {host}:{port} ({exc.strerror or exc}): give another --host or --port " \
               "(GRAPHGATE_HOST, GRAPHGATE_PORT)"
    url = local_url(host, port)
    holder = port_holder(url)
    if holder == "graphgate":
        return (f"GraphGate is already running on {url} (with another store): stop it, or give this one another "
                "port with --port (GRAPHGATE_PORT)")
    if holder == "ollama":
        return (f"port {port} on {host} is Ollama's (it answers at {url}): GraphGate stands in front of Ollama on "
                "a port of its own; give it one with --port (GRAPHGATE_PORT, 11435 by default)")
    return (f"port {port} on {host} is already in use by another program: stop it, or give GraphGate another port "
            "with --port (GRAPHGATE_PORT)")


def port_holder(url: str) -> str | None:
    """"graphgate" or "ollama" when that is what answers at ``url``; None for anything else."""
    try:
        with httpx.Client(base_url=url, timeout=PROBE_SECONDS, trust_env=False) as client:
            health = client.get("/rag/health")
            with contextlib.suppress(ValueError):
                if isinstance(health.json(), dict) and "upstream" in health.json():
                    return "graphgate"
            if client.get("/").text.strip() == "Ollama is running":
                return "ollama"
    except httpx.HTTPError:
        return None
    return None


class Listening(uvicorn.Server):
    """uvicorn's server on the sockets ``bind`` made, saying where it listens once started (uvicorn
    says it only for the sockets it binds itself), and calling ``stopped`` once shut down."""

    def __init__(self, config: uvicorn.Config, url: str, stopped: Callable[[], None]) -> None:
        super().__init__(config)
        self.url = url
        self.stopped = stopped

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            logging.getLogger("uvicorn.error").info("GraphGate is listening on %s (press CTRL+C to stop)", self.url)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets)
        finally:
            self.stopped()
