"""``graphgate ingest``, ``status``, ``query`` and ``reindex``.

``ingest`` and ``status`` talk to the running gateway over its /rag API; when none answers they
start the gateway in-process (same code, same API) for the duration of the command, since only
one process may open the store at a time. ``reindex`` needs the store to itself.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from proxy.cli.serving import store_in_use
from proxy.core.data_dir import DATABASE_FILE, has_store
from proxy.core.errors import BadRequest, GraphGateError, StoreUnavailable
from proxy.core.hosts import local_url
from proxy.core.metadata import check_metadata, parse_filter
from proxy.core.settings import Settings
from proxy.core.settings_sections import ClientSettings, StoreSettings
from proxy.parsing.files import SUPPORTED_TYPES

console = Console(stderr=True)


def gateway_url(settings: ClientSettings) -> str:
    return local_url(settings.host, settings.port)


class CommandError(GraphGateError):
    """A sentence for the user that ends the command (exit status 1) without a traceback."""


def no_store_message(settings: StoreSettings, url: str, *, can_create: bool) -> str:
    what = (f"no gateway answers at {url} and there is no knowledge store at {settings.data_dir} "
            f"(no {DATABASE_FILE} there)")
    hint = ("start `graphgate serve` first, or give --port / --data-dir (GRAPHGATE_PORT, GRAPHGATE_DATA_DIR) "
            "if the gateway or the store is elsewhere")
    return f"{what}: {hint}" + ("; or add --create to start a new store there" if can_create else "")


@contextlib.asynccontextmanager
async def rag_client(settings: Settings, *, create: bool = False, offer_create: bool = False,
                     kb: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The running gateway's /rag API, or one run in this process over the store when none answers;
    with ``kb``, every call is on that knowledge base (which must exist).

    Never a second store by accident: without a gateway, the store must already exist where the
    settings say (or ``create`` must be asked for), and it must not be held by another process."""
    headers = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    if kb:
        headers["x-graphgate-kb"] = kb
    url = gateway_url(settings)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, trust_env=False) as client:
        try:
            probe = await client.get("/rag/stats")
            if probe.status_code == 401:  # a console password or an API key guards the gateway's /rag
                raise CommandError(f"the gateway at {url} needs its API key: set GRAPHGATE_API_KEY (or --api-key) "
                                   "for this command; a gateway with only a console password needs an API key "
                                   "set too for the command line")
            problem = _base_problem(probe)
            if problem is not None:
                raise CommandError(problem)
            console.print(f"[dim]using the gateway at {url}[/dim]")
            yield client
            return
        except httpx.ConnectError:
            pass
    if not has_store(settings.data_dir) and not create:
        raise CommandError(no_store_message(settings, url, can_create=offer_create))
    busy = store_in_use(settings)   # who has the store, said rather than DuckDB's lock error
    if busy is not None:
        gateway = busy.startswith("GraphGate is already running")
        raise CommandError(f"no gateway answers at {url}, and the knowledge store at {settings.data_dir} cannot be "
                           f"opened: {busy}" + ("; give that gateway's port with --port (GRAPHGATE_PORT)" if gateway
                                                else ""))
    from proxy.app import create_app  # no gateway running: run one in this process

    app = create_app(settings, watch_seconds=0)  # a command's few calls say for themselves if the upstream is down
    problem = None   # said after the in-process gateway has stopped (its task groups would wrap the error)
    async with app.router.lifespan_context(app):
        error = app.state.gateway.knowledge_error
        if error is not None:
            problem = (f"no gateway answers at {url}, and the knowledge store at {settings.data_dir} "
                       f"cannot be opened ({error}); if a gateway runs on another port, give it with --port")
        else:
            state = "a new store" if create and not has_store(settings.data_dir) else "the store"
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=url, headers=headers, timeout=None) as client:
                problem = _base_problem(await client.get("/rag/stats"))
                if problem is None:
                    console.print(f"[dim]no gateway at {url}; working on {state} at {settings.data_dir} directly[/dim]")
                    yield client
    if problem is not None:
        raise CommandError(problem)


def _base_problem(probe: httpx.Response) -> str | None:
    """Why a command cannot work on the knowledge base it names (none, or a name that cannot be one)."""
    if probe.status_code not in (400, 404):
        return None
    try:
        error = probe.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if not isinstance(error, str):   # not GraphGate's answer: another program has the port
        origin = f"{probe.request.url.scheme}://{probe.request.url.netloc.decode()}"
        return (f"something other than GraphGate answers at {origin} ({probe.status_code} to /rag/stats): "
                "give GraphGate's port with --port (GRAPHGATE_PORT)")
    return f"{error} (GET /rag/kbs lists them, POST /rag/kbs makes one)"


def collect_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_TYPES)
        elif path.is_file():
            files.append(path)
        else:
            console.print(f"[red]no such file or folder: {raw}[/red]")
    return files


UPLOADS_IN_FLIGHT = 16  # uploads that reach the gateway together are stored in one transaction (8 left
# the gateway waiting on its writer between rounds; more holds more files in memory at once)


JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _meta_value(text: str) -> str | int | float:
    """``--meta``'s value: a number when it reads as a JSON number ("2024", "0.5"), else the text
    ("007" and "1e999" stay text: a number would lose what was typed)."""
    if JSON_NUMBER.fullmatch(text):
        number = json.loads(text)
        if not isinstance(number, float) or math.isfinite(number):
            return number
    return text


def upload_metadata(text: str | None, pairs: list[str] | None) -> dict[str, Any] | None:
    """``--metadata``'s JSON object with the ``--meta KEY=VALUE`` pairs over it (a key given again
    makes a list), checked as the gateway checks it; None when neither flag was given."""
    if text is None and not pairs:
        return None
    try:
        metadata: dict[str, Any] = dict(check_metadata(text, where="--metadata")) if text is not None else {}
        given: dict[str, list[str | int | float]] = {}
        for pair in pairs or []:
            key, equals, value = pair.partition("=")
            if not equals:
                raise CommandError(f"--meta takes KEY=VALUE, not {pair!r}")
            given.setdefault(key.strip(), []).append(_meta_value(value.strip()))
        metadata.update({key: values[0] if len(values) == 1 else values for key, values in given.items()})
        return check_metadata(metadata, where="the metadata (--metadata, --meta)")
    except BadRequest as exc:
        raise CommandError(exc.message) from None


def query_filter(text: str) -> Any:
    """``--filter``'s JSON object, checked here so that a typo stops before any gateway is asked."""
    try:
        parse_filter(text, where="--filter")
    except BadRequest as exc:
        raise CommandError(exc.message) from None
    return json.loads(text) if text.strip() else {}


async def _upload(client: httpx.AsyncClient, files: list[Path],
                  metadata: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in files]
    limiter = anyio.CapacityLimiter(UPLOADS_IN_FLIGHT)
    fields = None if metadata is None else {"metadata": json.dumps(metadata, ensure_ascii=False)}

    async def one(i: int, path: Path) -> None:
        async with limiter:
            data = await anyio.to_thread.run_sync(path.read_bytes)
            response = await client.post("/rag/documents", files={"file": (path.name, data)}, data=fields)
        body = response.json()
        result = (body.get("documents") or [{"name": path.name, "outcome": "rejected", "error": body.get("error")}])[0]
        result["path"] = str(path)
        results[i] = result
        if result["outcome"] == "rejected":
            console.print(f"[red]rejected[/red] {path}: {result.get('error')}")

    async def lane(indexes: list[int]) -> None:
        for i in indexes:  # files of one name in order: the later one is the newer version
            await one(i, files[i])

    lanes: dict[str, list[int]] = {}
    for i, path in enumerate(files):
        lanes.setdefault(path.name, []).append(i)
    async with anyio.create_task_group() as group:
        for indexes in lanes.values():
            group.start_soon(lane, indexes)
    return results


async def _follow(client: httpx.AsyncClient, ids: list[str]) -> dict[str, dict[str, Any]]:
    final: dict[str, dict[str, Any]] = {}
    said: set[str] = set()   # why documents wait, said once
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("processing", total=len(ids))
        while len(final) < len(ids):
            for document_id in [i for i in ids if i not in final]:
                response = await client.get(f"/rag/documents/{document_id}")
                if response.status_code == 404:  # a later file of the same name replaced it before it ran
                    final[document_id] = {"status": "superseded"}
                    continue
                document = response.json()
                if document.get("status") in ("processed", "failed"):
                    final[document_id] = document
                    if document["status"] == "failed":
                        console.print(f"[red]failed[/red] {document['name']}: {document['error']}")
                elif document.get("status") == "pending" and document.get("error"):   # held back, saying why
                    final[document_id] = {**document, "status": "waiting"}
                    if document["error"] not in said:
                        said.add(document["error"])
                        console.print(f"[yellow]waiting[/yellow]: {document['error']}")
            progress.update(task, completed=len(final))
            await anyio.sleep(0.3)
    return final


async def ingest(settings: Settings, paths: list[str], create: bool = False, metadata_json: str | None = None,
                 meta_pairs: list[str] | None = None, kb: str | None = None) -> int:
    metadata = upload_metadata(metadata_json, meta_pairs)  # a bad flag stops before anything is sent
    files = collect_files(paths)
    if not files:
        console.print("nothing to ingest (supported: " + ", ".join(SUPPORTED_TYPES) + ")")
        return 1
    async with rag_client(settings, create=create, offer_create=True, kb=kb) as client:
        results = await _upload(client, files, metadata)
        waiting = [r["id"] for r in results if r["outcome"] in ("accepted", "replaced")]
        final = await _follow(client, waiting)
    counts = {"processed": 0, "failed": 0, "duplicate": 0, "rejected": 0, "superseded": 0, "waiting": 0}
    for result in results:
        outcome = final[result["id"]]["status"] if result.get("id") in final else result["outcome"]
        counts[outcome if outcome in counts else "processed"] += 1
    console.print(", ".join(f"{n} {k}" for k, n in counts.items() if n or k != "waiting"))
    return 1 if counts["failed"] or counts["rejected"] else 0


async def status(settings: Settings, kb: str | None = None, as_json: bool = False) -> int:
    """A few lines for a person (``--json``: the store's counts and the pipeline's work, whole)."""
    async with rag_client(settings, kb=kb) as client:
        stats = (await client.get("/rag/stats")).json()
        pipeline = (await client.get("/rag/pipeline")).json()
        health = None if as_json else (await client.get("/rag/health")).json()
    if as_json or health is None:
        print(json.dumps({"store": stats, "pipeline": pipeline}, indent=2))
        return 0
    print("\n".join(status_lines(kb or "default", stats, pipeline, health)))
    return 0


def status_lines(kb: str, stats: dict[str, Any], pipeline: dict[str, Any], health: dict[str, Any]) -> list[str]:
    """``graphgate status`` for a person: the documents, the graph, the work under way, what is wrong."""
    documents = stats.get("documents") or {}
    processed = documents.get("processed", 0)
    others = [f"{n} {state}" for state, n in documents.items() if n and state != "processed"]
    lines = [f"knowledge base {kb}: {plural(processed, 'document')} processed" + "".join(f", {o}" for o in others)]
    communities = (stats.get("communities") or {}).get("count") or 0
    lines.append(f"graph: {plural(stats.get('entities', 0), 'entity', 'entities')}, "
                 f"{plural(stats.get('relations', 0), 'relation')}, {plural(stats.get('chunks', 0), 'chunk')}"
                 + (f", {plural(communities, 'community summary', 'community summaries')}" if communities else ""))
    queued, running = len(pipeline.get("queued") or []), len(pipeline.get("running") or [])
    lines.append(f"pipeline: working ({queued} queued, {running} running, {pipeline.get('chunks_per_minute', 0)} "
                 "chunks a minute)" if queued or running else "pipeline: idle")
    if isinstance(stats.get("bytes_on_disk"), int):
        lines.append(f"on disk: {size_in_words(stats['bytes_on_disk'])}")
    problems = health.get("problems") or []
    lines.append("health: ok" if not problems else f"health: {plural(len(problems), 'problem')}")
    lines += [f"  - {problem}" for problem in problems]
    if documents.get("failed"):
        lines.append("the failed documents say why: GET /rag/documents?status=failed, or the console's Documents "
                     "page; `graphgate status --json` gives every count")
    return lines


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def size_in_words(size: int) -> str:
    if size < 1024:
        return f"{size:,} bytes"
    scaled = size / 1024
    for unit in ("KB", "MB", "GB"):
        if scaled < 1024 or unit == "GB":
            break
        scaled /= 1024
    return f"{scaled:.1f} {unit}"


async def query(settings: Settings, request: dict[str, Any], as_json: bool, kb: str | None = None) -> int:
    if isinstance(request.get("filters"), str):
        request = {**request, "filters": query_filter(request["filters"])}
    async with rag_client(settings, kb=kb) as client:
        response = await client.post("/rag/query", json=request)
    result = response.json()
    if response.status_code != 200:
        console.print(f"[red]{result.get('error')}[/red]")
        return 1
    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    keywords = result["keywords"] or {}
    print(f"mode {result['mode']}; keywords: low {keywords.get('low_level', [])}, "
          f"high {keywords.get('high_level', [])}")
    print(f"{len(result['entities'])} entities, {len(result['relations'])} relations, {len(result['chunks'])} chunks; "
          f"tokens {result['tokens']}; timings (ms) {result['timings']}")
    if "filtered" in result:
        print(f"filter {result['filtered']['filters']}: {result['filtered']['documents']} documents match")
    print()
    print(result["context"] or f"(no context: {result['skipped']})")
    if "answer" in result:
        print("\n--- answer ---\n" + result["answer"])
    return 0


async def reindex(settings: Settings, kb: str | None = None) -> int:
    from proxy.knowledge.bases import base_settings_sync
    from proxy.knowledge.reindex import reindexing

    if kb:   # the base's own directory and settings, from the list on disk (the gateway is not running)
        try:
            settings = await anyio.to_thread.run_sync(base_settings_sync, settings, kb)
        except GraphGateError as exc:
            raise CommandError(f"{exc.message} (GET /rag/kbs lists them)") from None
        except (ValueError, OSError) as exc:
            raise CommandError(f"knowledge base {kb!r}: {exc}") from None
    if settings.store == "embedded" and not has_store(settings.data_dir):
        raise CommandError(f"there is no knowledge store at {settings.data_dir} (no {DATABASE_FILE} there): "
                           "nothing to reindex; give --data-dir (GRAPHGATE_DATA_DIR) if it is elsewhere")
    tasks: dict[str, Any] = {}
    try:
        async with reindexing(settings, kb or "default") as run_reindex:  # StoreUnavailable only while opening
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          console=console) as bar:

                def report(what: str, done: int, total: int) -> None:
                    if what not in tasks:
                        tasks[what] = bar.add_task(what, total=total)
                    bar.update(tasks[what], completed=done, total=total)

                sizes = await run_reindex(report)
    except StoreUnavailable as exc:  # most often: the running gateway holds the lock
        console.print(f"[red]cannot open the store at {settings.data_dir}: {exc.message}[/red]\n"
                      "stop `graphgate serve` first: reindex needs the store to itself")
        return 1
    except GraphGateError as exc:   # the upstream or the store failed half-way: what was re-embedded is kept
        kept = " (the vectors made so far are kept: run it again to go on)" if any(
            what.startswith("re-embedding") for what in tasks) else ""
        raise CommandError(f"reindex stopped: {exc.message}{kept}") from None
    if any(what.startswith("re-embedding") for what in tasks):
        console.print(f"re-embedded everything with {settings.embed_model}")
    console.print("indexes rebuilt: " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    return 0


def run(coroutine_fn: Any, *args: Any) -> int:
    try:
        return anyio.run(coroutine_fn, *args)
    except CommandError as exc:
        console.print(f"graphgate: {exc}", style="red", markup=False, highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
