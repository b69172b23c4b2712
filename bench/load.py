"""Load: many concurrent chats through GraphGate while documents are ingested.

The fake Ollama runs in its own process with realistic delays (a chat's first token after
50-150 ms, then a token every 10-20 ms; structured extraction replies after 200 ms, keyword
replies after 100 ms, embeddings after 20 ms) and answers structured requests like a perfect model
on the generated corpus (tests/extractor.py). GraphGate runs as a real `python -m proxy serve` on
a free port with a fresh data directory. Everything listens on 127.0.0.1 only.

  1. direct baseline: the chat clients (half streaming; /api/chat and some /v1/chat/completions)
     talk to the fake upstream itself, --baseline-turns turns each;
  2. load: the documents are uploaded through /rag/documents while the same clients chat through
     GraphGate until every document is processed (or --turns each, or at most --seconds); every
     chat is augmented once the first documents are in the knowledge base, and its keyword
     extraction and query embedding go to the fake too;
  3. the figures: requests, failures (any non-2xx, error line, broken or unfinished stream, wrong
     answer; each one printed), chat latency and time to first token p50/p95/max direct and
     through GraphGate and the difference (the added latency), the share of augmented chats,
     ingestion throughput, and the gateway's peak RSS (VmHWM) and RSS at the end.

    python bench/load.py [--documents 200] [--clients 100] [--turns N | --seconds S]

Exits non-zero if any request failed or the ingestion did not complete (all processed, none
failed). `tests/test_load.py` runs the same scenario small in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.proxy_overhead import cpu_seconds, free_port, percentile  # noqa: E402

MODEL = "llama3.2:latest"
REPLY = [f"{word} " for word in (
    "Based on the documents the knowledge base holds this is what they say about the subject of your "
    "question together with the people organisations and places that appear next to it in the reports "
    "and how they are connected to each other over the years covered").split()]
CONTEXT_MARK = "You answer questions using the knowledge base context"  # proxy/retrieval/context.py
SYLLABLES = ["ka", "zor", "vel", "mir", "tan", "quo", "rex", "lun", "dra", "pel", "sif", "nox", "bri", "tal",
             "gor", "wen", "ys", "ud", "fam", "hil"]
TOPICS = ["water quality", "rail freight", "coastal erosion", "grain storage", "bridge inspection", "vaccine logistics",
          "seed banks", "wind survey", "archive digitisation", "river dredging", "school meals", "fire lookout",
          "salt marsh", "tram signalling", "beekeeping", "glacier monitoring"]
ORG_KINDS = ["Institute", "Foundation", "Group", "Cooperative", "Authority", "Trust"]
PLACE_KINDS = ["Port {}", "{} Valley", "{} Heights", "Lake {}", "{} Crossing"]


# ----------------------------------------------------------------------------- the corpus

@dataclass
class Corpus:
    people: list[str]
    organisations: list[str]
    places: list[str]
    documents: list[tuple[str, str]]             # (name, text)
    casts: list[tuple[list[str], list[str], list[str]]]  # per document: people, organisations, places

    @property
    def entity_types(self) -> dict[str, str]:
        return {**{p: "Person" for p in self.people}, **{o: "Organization" for o in self.organisations},
                **{p: "Location" for p in self.places}}


def _invented(count: int, rng: random.Random, taken: set[str]) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()
        if name not in taken:
            taken.add(name)
            names.append(name)
    return names


def make_corpus(documents: int, *, seed: int = 7, target_chars: int = 6000) -> Corpus:
    """Reports of about ``target_chars`` characters (6,000 = ~1,400 cl100k tokens, two chunks at
    the default chunk size), each with a cast of six people, two organisations and two places drawn
    from shared pools, so entities recur across documents and the graph connects them."""
    rng = random.Random(seed)
    taken: set[str] = set()
    people = _invented(max(60, documents * 2), rng, taken)
    organisations = [f"{base} {rng.choice(ORG_KINDS)}" for base in _invented(max(10, documents // 5), rng, taken)]
    places = [rng.choice(PLACE_KINDS).format(base) for base in _invented(max(10, documents // 5), rng, taken)]
    docs, casts = [], []
    for d in range(documents):
        cast, orgs, where = rng.sample(people, 6), rng.sample(organisations, 2), rng.sample(places, 2)
        topic = rng.choice(TOPICS)
        paragraphs, sentences, size = [f"# Report {d}: {topic} in {where[0]}"], [], 0
        while size < target_chars:
            p1, p2 = rng.sample(cast, 2)
            org, place, other = rng.choice(orgs), rng.choice(where), rng.choice(TOPICS)
            year = rng.randint(1990, 2024)
            sentence = rng.choice([
                f"{p1} met {p2} at the {org} office in {place} to discuss the {topic} programme.",
                f"In {year}, {org} appointed {p1} to lead its work on {topic} around {place}.",
                f"{p1} and {p2} co-authored a study of {other} that {org} published in {year}.",
                f"{p1} moved to {place} after {org} closed its {other} unit, and {p2} took over the budget.",
                f"The {topic} survey in {place} was funded by {org}, which also hired {p2} as an adviser.",
                f"{p2} disagreed with {p1} about the cost of the {topic} plan, but both signed the final report.",
                f"The findings were summarised in a {rng.randint(8, 90)}-page report and discussed at length by "
                f"the committee.",
                f"Several observers questioned the methodology of the {other} figures, yet the conclusions held "
                f"up on review in {year}.",
            ])
            sentences.append(sentence)
            size += len(sentence) + 1
            if len(sentences) == 5:
                paragraphs.append(" ".join(sentences))
                sentences = []
        if sentences:
            paragraphs.append(" ".join(sentences))
        docs.append((f"report-{d:04d}.md", "\n\n".join(paragraphs)))
        casts.append((cast, orgs, where))
    return Corpus(people, organisations, places, docs, casts)


def question(corpus: Corpus, rng: random.Random, follow_up: bool) -> str:
    if follow_up and rng.random() < 0.3:
        return rng.choice(["And what did they do after that?", "Who else worked with them?",
                           "Which report says so?"])
    cast, orgs, where = rng.choice(corpus.casts)
    a, b = rng.sample(cast, 2)
    return rng.choice([f"What do you know about {a}?", f"How are {a} and {b} connected?",
                       f"What does the {rng.choice(orgs)} work on?", f"What happened in {rng.choice(where)}?",
                       f"Who did {a} work with at the {rng.choice(orgs)}?"])


# ----------------------------------------------------------------------------- the fake upstream

@dataclass(kw_only=True)
class FakeDelays:
    """How long the fake upstream takes (seconds): set for a load run, passed on to the fake."""
    first_token: tuple[float, float] = (0.05, 0.15)
    token_interval: tuple[float, float] = (0.010, 0.020)
    extract_delay: float = 0.2
    keyword_delay: float = 0.1
    embed_delay: float = 0.02

    def delays(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(FakeDelays)}


@dataclass(kw_only=True)
class FakeConfig(FakeDelays):
    port: int
    entity_types: dict[str, str]
    embed_dim: int = 768
    seed: int = 1


def serve_fake(config_path: str) -> None:
    """The fake upstream process: ``python -c "from bench.load import serve_fake; serve_fake(path)"``."""
    import anyio
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.extractor import KnownFacts
    from tests.fake_ollama import FakeOllama

    cfg = FakeConfig(**json.loads(Path(config_path).read_text()))
    names = sorted(cfg.entity_types, key=len, reverse=True)
    pattern = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, names)) + r")(?!\w)")

    class Facts(KnownFacts):
        """KnownFacts with one compiled pattern instead of a regex per name and sentence."""

        def names_in(self, sentence: str) -> list[str]:
            return list(dict.fromkeys(pattern.findall(sentence)))

    class Discard(list):
        def append(self, item: Any) -> None:  # keep memory flat
            pass

    rng = random.Random(cfg.seed)
    counts: Counter[str] = Counter()

    class LoadFake(FakeOllama):
        @property  # a fresh inter-token delay for every line of every stream
        def chunk_delay(self) -> float:
            return rng.uniform(*cfg.token_interval)

        @chunk_delay.setter
        def chunk_delay(self, value: float) -> None:
            pass

        async def _think(self, request: Request, openai: bool) -> None:
            try:
                req = json.loads(await request.body())  # Starlette keeps the body for the handler
            except ValueError:
                return
            if not isinstance(req, dict):
                return
            fmt = req.get("response_format") if openai else req.get("format")
            properties = (fmt.get("properties") if isinstance(fmt, dict) else None) or {}
            if "low_level_keywords" in properties:
                counts["keywords"] += 1
                await anyio.sleep(cfg.keyword_delay)
            elif "summary" in properties:
                counts["summaries"] += 1
                await anyio.sleep(cfg.extract_delay)
            elif fmt:
                counts["extractions"] += 1
                await anyio.sleep(cfg.extract_delay)
            else:
                messages = req.get("messages") or []
                first = messages[0] if messages and isinstance(messages[0], dict) else {}
                augmented = first.get("role") == "system" and CONTEXT_MARK in str(first.get("content"))
                counts["chats augmented" if augmented else "chats plain"] += 1
                delay = rng.uniform(*cfg.first_token)
                if not req.get("stream", not openai):  # the whole answer is generated first
                    delay += sum(rng.uniform(*cfg.token_interval) for _ in REPLY)
                await anyio.sleep(delay)

        async def _chat(self, request: Request) -> Any:
            await self._think(request, openai=False)
            return await super()._chat(request)

        async def _v1_chat(self, request: Request) -> Any:
            await self._think(request, openai=True)
            return await super()._v1_chat(request)

        async def _embed(self, request: Request) -> Any:
            counts["embeds"] += 1
            await anyio.sleep(cfg.embed_delay)
            return await super()._embed(request)

    fake = LoadFake(reply=REPLY, embed_dim=cfg.embed_dim)
    fake.requests = Discard()
    fake.structured = Facts(dict(cfg.entity_types))
    fake.structured.calls = Discard()

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(dict(counts))

    fake.app.router.routes.insert(0, Route("/__stats", stats))
    uvicorn.run(fake.app, host="127.0.0.1", port=cfg.port, log_level="warning", access_log=False)


# ----------------------------------------------------------------------------- processes

def wait_up(url: str, process: subprocess.Popen, path: str = "/", timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited during start-up (code {process.returncode})")
        try:
            if httpx.get(url + path, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in MB, from /proc."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []  # (monotonic, RSS MB)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            rss = proc_status(self.pid).get("VmRSS")
            if rss is not None:
                self.samples.append((time.monotonic(), rss))


@dataclass
class Servers:
    fake: subprocess.Popen
    gate: subprocess.Popen
    direct: str
    gateway: str
    data_dir: Path
    log: Path

    def stop(self) -> None:
        for process in (self.gate, self.fake):
            if process.poll() is None:
                process.terminate()
        for process in (self.gate, self.fake):
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def start_servers(fake_config: FakeConfig, gate_env: dict[str, str], work: Path) -> Servers:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIKTOKEN_CACHE_DIR": ""}
    config_file = work / "fake.json"
    config_file.write_text(json.dumps(asdict(fake_config)))
    fake = subprocess.Popen([sys.executable, "-c", "import sys; from bench.load import serve_fake; "
                             "serve_fake(sys.argv[1])", str(config_file)], env=env, cwd=ROOT)
    direct = f"http://127.0.0.1:{fake_config.port}"
    gate_port = free_port()
    data_dir, log = work / "data", work / "graphgate.log"
    env = {**env, "GRAPHGATE_UPSTREAM": direct, "GRAPHGATE_HOST": "127.0.0.1", "GRAPHGATE_PORT": str(gate_port),
           "GRAPHGATE_DATA_DIR": str(data_dir), "GRAPHGATE_LOG_LEVEL": "warning", **gate_env}
    with log.open("wb") as sink:
        gate = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=env, cwd=ROOT, stderr=sink)
    servers = Servers(fake, gate, direct, f"http://127.0.0.1:{gate_port}", data_dir, log)
    try:
        wait_up(direct, fake)
        wait_up(servers.gateway, gate, "/rag/stats")
    except BaseException:
        servers.stop()
        raise
    return servers


# ----------------------------------------------------------------------------- clients

@dataclass
class Chat:
    phase: str
    kind: str          # "api/chat stream", "v1 non-stream", ...
    start: float       # monotonic
    seconds: float
    first: float       # seconds to the first content (the whole answer when not streaming)
    error: str | None = None


def client_kind(i: int) -> tuple[bool, bool]:
    """(openai, stream) of client ``i``: half stream; every fifth uses /v1/chat/completions."""
    return i % 5 == 4, i % 2 == 0


async def one_chat(client: httpx.AsyncClient, openai: bool, stream: bool,
                   messages: list[dict[str, str]]) -> tuple[str, float]:
    """The answer's text and the seconds to its first content; AssertionError on anything wrong."""
    start = time.perf_counter()
    path = "/v1/chat/completions" if openai else "/api/chat"
    body = {"model": MODEL, "messages": messages, "stream": stream}
    if not stream:
        response = await client.post(path, json=body)
        assert response.status_code == 200, f"HTTP {response.status_code}: {response.text[:200]}"
        data = response.json()
        if openai:
            text = data["choices"][0]["message"]["content"]
        else:
            assert data.get("done") is True, f"not done: {str(data)[:200]}"
            text = data["message"]["content"]
        return text, time.perf_counter() - start
    parts: list[str] = []
    first = None
    finished = False
    async with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            raise AssertionError(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            assert not finished, f"a line after the end: {line[:200]}"
            if openai:
                assert line.startswith("data: "), f"not an SSE data line: {line[:200]}"
                payload = line[6:]
                if payload == "[DONE]":
                    finished = True
                    continue
                data = json.loads(payload)
                assert "error" not in data, f"error event: {payload[:200]}"
                piece = (data["choices"][0]["delta"].get("content") or "") if data.get("choices") else ""
            else:
                data = json.loads(line)
                assert "error" not in data, f"error line: {line[:200]}"
                piece = data.get("message", {}).get("content") or ""
                finished = bool(data.get("done"))
            if piece:
                first = first or time.perf_counter()
                parts.append(piece)
    assert finished, "the stream ended before its last line"
    return "".join(parts), (first or time.perf_counter()) - start


async def chat_client(i: int, base: str, corpus: Corpus, phase: str, chats: list[Chat], *, turns: int | None,
                      stop: asyncio.Event, request_timeout: float) -> None:
    openai, stream = client_kind(i)
    kind = f"{'v1' if openai else 'api/chat'} {'stream' if stream else 'non-stream'}"
    rng = random.Random(f"{phase}-{i}")
    expected = "".join(REPLY)
    history: list[dict[str, str]] = []
    done = 0
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)  # one user, one connection
    async with httpx.AsyncClient(base_url=base, timeout=request_timeout, limits=limits) as client:
        while (turns is None or done < turns) and not stop.is_set():
            if len(history) >= 6:  # a new conversation after three turns
                history = []
            messages = [*history, {"role": "user", "content": question(corpus, rng, bool(history))}]
            start = time.monotonic()
            try:
                text, first = await one_chat(client, openai, stream, messages)
                assert text == expected, f"unexpected answer: {text[:120]!r}"
                chats.append(Chat(phase, kind, start, time.monotonic() - start, first))
                history = [*messages, {"role": "assistant", "content": text}]
            except Exception as exc:  # noqa: BLE001 - every failure is counted and printed
                chats.append(Chat(phase, kind, start, time.monotonic() - start, 0.0,
                                  f"{type(exc).__name__}: {exc}"[:300]))
                history = []
            done += 1


@dataclass
class Ingestion:
    uploaded: int = 0
    upload_errors: list[str] = field(default_factory=list)
    poll_errors: list[str] = field(default_factory=list)
    started: float = 0.0
    first_processed: float | None = None   # monotonic time the knowledge base stopped being empty
    finished: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    traces: dict[int, dict[str, Any]] = field(default_factory=dict)   # the chat turns' traces, by id


async def ingest(base: str, corpus: Corpus, result: Ingestion, done: asyncio.Event, ingest_timeout: float) -> None:
    """Upload every document, then poll /rag/stats until all are processed or failed."""
    result.started = time.monotonic()
    deadline = result.started + ingest_timeout
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for name, text in corpus.documents:
            try:
                response = await client.post("/rag/documents", json={"name": name, "text": text})
                if response.status_code == 202:
                    result.uploaded += 1
                else:
                    result.upload_errors.append(f"{name}: HTTP {response.status_code} {response.text[:200]}")
            except httpx.HTTPError as exc:
                result.upload_errors.append(f"{name}: {type(exc).__name__}: {exc}")
        while time.monotonic() < deadline:
            try:
                response = await client.get("/rag/stats")
                assert response.status_code == 200, f"HTTP {response.status_code}"
                stats = response.json()
            except (httpx.HTTPError, AssertionError, ValueError) as exc:
                result.poll_errors.append(f"/rag/stats: {type(exc).__name__}: {exc}")
                await asyncio.sleep(1)
                continue
            result.stats = stats
            documents = stats["documents"]
            if result.first_processed is None and documents.get("processed", 0) > 0:
                result.first_processed = time.monotonic()
            if documents.get("processed", 0) + documents.get("failed", 0) >= result.uploaded:
                result.finished = time.monotonic()
                break
            await asyncio.sleep(0.5)
    done.set()


async def run_phase(base: str, corpus: Corpus, phase: str, clients: int, *, turns: int | None,
                    stop: asyncio.Event, request_timeout: float) -> list[Chat]:
    chats: list[Chat] = []
    await asyncio.gather(*(chat_client(i, base, corpus, phase, chats, turns=turns, stop=stop,
                                       request_timeout=request_timeout)
                           for i in range(clients)))
    return chats


async def load_phase(servers: Servers, corpus: Corpus, clients: int, *, turns: int | None, seconds: float,
                     ingest_timeout: float, request_timeout: float) -> tuple[list[Chat], Ingestion]:
    """Ingest while chatting. Without ``turns`` the chats go on until the ingestion ends (at most
    ``seconds``); with it, each client chats ``turns`` times and the ingestion is awaited after."""
    ingestion, ingested, stop = Ingestion(), asyncio.Event(), asyncio.Event()
    ingest_task = asyncio.create_task(ingest(servers.gateway, corpus, ingestion, ingested, ingest_timeout))

    async def stopper() -> None:
        if turns is None:
            try:
                await asyncio.wait_for(ingested.wait(), seconds)
            except TimeoutError:
                pass
        else:
            await asyncio.sleep(seconds)
        stop.set()

    stop_task = asyncio.create_task(stopper())
    sample_task = asyncio.create_task(sample_traces(servers.gateway, ingestion.traces, stop))
    chats = await run_phase(servers.gateway, corpus, "graphgate", clients, turns=turns, stop=stop,
                            request_timeout=request_timeout)
    stop_task.cancel()
    await ingest_task
    await sample_task
    return chats, ingestion


async def sample_traces(base: str, traces: dict[int, dict[str, Any]], stop: asyncio.Event) -> None:
    """The gateway's turn traces (GET /rag/traces keeps the last 100), read every second until
    ``stop``: how many turns took the light path under the burst, and where their time went."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        while not stop.is_set():
            try:
                response = await client.get("/rag/traces")
                for row in response.json().get("traces", []):
                    traces[row["id"]] = row
            except (httpx.HTTPError, ValueError):
                pass   # a sample missed under load is no failure of the run
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


# ----------------------------------------------------------------------------- the whole run

@dataclass(kw_only=True)
class LoadConfig(FakeDelays):
    documents: int = 200
    clients: int = 100
    turns: int | None = None          # per client in the load phase; None: until the ingestion ends
    seconds: float = 420.0            # longest load phase
    baseline_turns: int = 5
    doc_chars: int = 6000
    ingest_timeout: float = 480.0
    request_timeout: float = 120.0
    gate_env: dict[str, str] = field(default_factory=dict)  # extra GRAPHGATE_* settings
    keep_data: bool = False


@dataclass
class LoadResult:
    config: LoadConfig
    baseline: list[Chat]
    chats: list[Chat]
    ingestion: Ingestion
    rss_start: float
    rss_peak: float        # VmHWM of the gateway at the end of the run
    rss_end: float
    rss_samples: list[tuple[float, float]]
    fake_stats: dict[str, int]
    log_warnings: Counter[str]
    wall: float
    cpu: dict[str, float] = field(default_factory=dict)   # CPU seconds of each process in the load phase

    @property
    def failures(self) -> list[Chat]:
        return [c for c in self.baseline + self.chats if c.error]

    @property
    def ingestion_complete(self) -> bool:
        docs = self.ingestion.stats.get("documents", {})
        return (self.ingestion.finished is not None and not self.ingestion.upload_errors
                and docs.get("processed", 0) == self.config.documents and docs.get("failed", 0) == 0)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.ingestion.poll_errors and self.ingestion_complete


def summarise_log(path: Path) -> Counter[str]:
    """GraphGate's warnings and errors by their message, numbers and ids blanked."""
    counts: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        match = re.search(r" (WARNING|ERROR|CRITICAL) ([\w.]+): (.*)", line)
        if match:
            counts[f"{match[1]} {match[2]}: " + re.sub(r"\d+(\.\d+)?", "N", match[3])[:140]] += 1
        elif line.startswith("Traceback"):
            counts["Traceback"] += 1
    return counts


def run_load(config: LoadConfig, *, progress: bool = False) -> LoadResult:
    wall = time.monotonic()
    corpus = make_corpus(config.documents, target_chars=config.doc_chars)
    work = Path(tempfile.mkdtemp(prefix="gg-load-"))
    fake_config = FakeConfig(port=free_port(), entity_types=corpus.entity_types, **config.delays())
    servers = start_servers(fake_config, config.gate_env, work)
    sampler = RssSampler(servers.gate.pid)
    sampler.start()
    say = print if progress else (lambda *a, **k: None)
    try:
        rss_start = proc_status(servers.gate.pid).get("VmRSS", float("nan"))
        say(f"fake upstream {servers.direct}, graphgate {servers.gateway} (pid {servers.gate.pid}), "
            f"RSS {rss_start:.0f} MB; baseline: {config.clients} clients x {config.baseline_turns} turns direct",
            flush=True)
        baseline = asyncio.run(run_phase(servers.direct, corpus, "direct", config.clients,
                                         turns=config.baseline_turns, stop=asyncio.Event(),
                                         request_timeout=config.request_timeout))
        say(f"load: {config.documents} documents uploaded while {config.clients} clients chat through GraphGate",
            flush=True)
        cpu_before = {name: cpu_seconds(pid) for name, pid in
                      (("gateway", servers.gate.pid), ("upstream", servers.fake.pid), ("clients", os.getpid()))}
        loaded = time.monotonic()
        chats, ingestion = asyncio.run(load_phase(servers, corpus, config.clients, turns=config.turns,
                                                  seconds=config.seconds, ingest_timeout=config.ingest_timeout,
                                                  request_timeout=config.request_timeout))
        cpu = {name: (cpu_seconds(pid) - cpu_before[name]) for name, pid in
               (("gateway", servers.gate.pid), ("upstream", servers.fake.pid), ("clients", os.getpid()))}
        cpu["seconds"] = time.monotonic() - loaded
        fake_stats = httpx.get(servers.direct + "/__stats", timeout=10).json()
        status = proc_status(servers.gate.pid)
        sampler.stopped.set()
        sampler.join()
        return LoadResult(config, baseline, chats, ingestion, rss_start, status.get("VmHWM", float("nan")),
                          status.get("VmRSS", float("nan")), sampler.samples, fake_stats,
                          summarise_log(servers.log), time.monotonic() - wall, cpu)
    finally:
        sampler.stopped.set()
        servers.stop()
        if not config.keep_data:
            shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------- the report

def _ms(values: list[float], p: float | None) -> float:
    if not values:
        return float("nan")
    return 1000 * (max(values) if p is None else percentile(values, p))


def report(result: LoadResult) -> None:
    cfg = result.config
    good = {name: [c for c in chats if not c.error] for name, chats in
            (("direct", result.baseline), ("graphgate", result.chats))}
    kb_ready = result.ingestion.first_processed
    after = [c for c in good["graphgate"] if kb_ready is not None and c.start >= kb_ready]
    print(f"\n{cfg.clients} clients (half streaming, {sum(client_kind(i)[0] for i in range(cfg.clients))} on "
          f"/v1/chat/completions), {cfg.documents} documents of ~{cfg.doc_chars} characters; delays: first token "
          f"{cfg.first_token[0] * 1000:.0f}-{cfg.first_token[1] * 1000:.0f} ms, a token every "
          f"{cfg.token_interval[0] * 1000:.0f}-{cfg.token_interval[1] * 1000:.0f} ms x {len(REPLY)}, extraction "
          f"{cfg.extract_delay * 1000:.0f} ms, keywords {cfg.keyword_delay * 1000:.0f} ms, embeddings "
          f"{cfg.embed_delay * 1000:.0f} ms")
    header = (f"{'path':<22} {'requests':>8} {'failed':>6} {'p50':>8} {'p95':>8} {'max':>8} "
              f"{'1st p50':>8} {'1st p95':>8} {'1st p99':>8}")
    print("\n" + header)
    rows: dict[str, list[float]] = {}
    for name, chats, all_chats in (("direct", good["direct"], result.baseline),
                                   ("graphgate (all)", good["graphgate"], result.chats),
                                   ("graphgate (KB ready)", after, None)):
        seconds = [c.seconds for c in chats]
        firsts = [c.first for c in chats if "non-stream" not in c.kind]
        rows[name] = [_ms(seconds, 50), _ms(seconds, 95), _ms(seconds, None), _ms(firsts, 50), _ms(firsts, 95),
                      _ms(firsts, 99)]
        count = len(all_chats) if all_chats is not None else len(chats)
        failed = sum(1 for c in all_chats if c.error) if all_chats is not None else 0
        print(f"{name:<22} {count:8d} {failed:6d} " + " ".join(f"{v:6.0f}ms" for v in rows[name]))
    for name in ("graphgate (all)", "graphgate (KB ready)"):
        added = [g - d for g, d in zip(rows[name], rows["direct"], strict=True)]
        label = "added " + name.removeprefix("graphgate ")
        print(f"{label:<22} {'':8} {'':6} " + " ".join(f"{v:+6.0f}ms" for v in added))
    by_kind = sorted({c.kind for c in result.chats})
    for kind in by_kind:
        d = [c.seconds for c in good["direct"] if c.kind == kind]
        g = [c.seconds for c in after if c.kind == kind]
        print(f"  {kind:<20} added p50 {_ms(g, 50) - _ms(d, 50):+6.0f} ms, p95 {_ms(g, 95) - _ms(d, 95):+6.0f} ms "
              f"({len(g)} chats after the KB had content)")

    stats = result.fake_stats
    augmented, plain = stats.get("chats augmented", 0), stats.get("chats plain", 0) - len(result.baseline)
    print(f"\nchats through GraphGate: {augmented + plain}, augmented {augmented} "
          f"({100 * augmented / max(1, augmented + plain):.0f} %); upstream calls: {stats.get('keywords', 0)} keyword, "
          f"{stats.get('extractions', 0)} extraction, {stats.get('summaries', 0)} summary, "
          f"{stats.get('embeds', 0)} embedding")
    report_traces(result.ingestion.traces)
    if result.cpu:
        span, turns = result.cpu["seconds"], max(1, len(result.chats))
        print(f"CPU in the load phase ({span:.0f} s, {turns / span:.1f} chats/s): gateway "
              f"{result.cpu['gateway'] / span:.2f} cores = {1000 * result.cpu['gateway'] / turns:.1f} ms a chat "
              f"(ingestion's share included), fake upstream {result.cpu['upstream'] / span:.2f}, "
              f"clients {result.cpu['clients'] / span:.2f} (of {os.cpu_count()} cores)")
    ing = result.ingestion
    docs = ing.stats.get("documents", {})
    if ing.finished is not None:
        span = ing.finished - ing.started
        print(f"ingestion: {docs.get('processed', 0)} processed, {docs.get('failed', 0)} failed of {cfg.documents} "
              f"in {span:.1f} s = {docs.get('processed', 0) / span:.2f} documents/s, "
              f"{ing.stats.get('chunks', 0) / span:.1f} chunks/s ({ing.stats.get('chunks', 0)} chunks, "
              f"{ing.stats.get('entities', 0)} entities, {ing.stats.get('relations', 0)} relations); "
              f"knowledge base non-empty after {(ing.first_processed or ing.finished) - ing.started:.1f} s")
    else:
        print(f"ingestion DID NOT COMPLETE within {cfg.ingest_timeout:.0f} s: {docs}")
    samples = [rss for _, rss in result.rss_samples]
    print(f"gateway RSS: {result.rss_start:.0f} MB at start, peak {result.rss_peak:.0f} MB (VmHWM; highest sample "
          f"{max(samples, default=float('nan')):.0f} MB), {result.rss_end:.0f} MB at the end")
    if result.log_warnings:
        print("gateway log:")
        for line, count in result.log_warnings.most_common(12):
            print(f"  {count:5d} x {line}")
    problems = [f"{c.phase} {c.kind}: {c.error}" for c in result.failures]
    problems += [f"upload: {e}" for e in ing.upload_errors] + [f"poll: {e}" for e in ing.poll_errors]
    if problems:
        print(f"\nFAILURES ({len(problems)}):")
        for line, count in Counter(problems).most_common(30):
            print(f"  {count:5d} x {line}")
    print(f"\n{'OK' if result.ok else 'FAILED'}: {len(result.failures)} failed requests, ingestion "
          f"{'complete' if result.ingestion_complete else 'INCOMPLETE'}; wall time {result.wall:.0f} s")


STAGES = ("queued", "embedding", "linking", "graph", "keywords", "keyword embedding", "keyword search", "fusion",
          "chunks", "context", "total")


def report_traces(traces: dict[int, dict[str, Any]]) -> None:
    """The sampled turn traces: how many were grounded, how many took the light path, and the
    retrieval's stages (p50 / p95 of what each traced turn spent, as GraphGate timed them)."""
    turns = [t for t in traces.values() if t.get("api") in ("ollama", "openai")]
    if not turns:
        return
    grounded = [t for t in turns if t.get("augmented")]
    light = [t for t in grounded if t["detail"].get("shed")]
    print(f"turn traces sampled: {len(turns)}, grounded {len(grounded)}, light path {len(light)} "
          f"({100 * len(light) / max(1, len(grounded)):.0f} % of the grounded)")
    reasons = Counter(t.get("reason") for t in turns if not t.get("augmented"))
    if reasons:
        print("  not grounded: " + ", ".join(f"{n} x {r}" for r, n in reasons.most_common(5)))
    for name, group in (("full", [t for t in grounded if not t["detail"].get("shed")]), ("light", light)):
        if not group:
            continue
        cells = []
        for stage in STAGES:
            values = [t["detail"]["timings"][stage] / 1000 for t in group if stage in t["detail"].get("timings", {})]
            if values:
                cells.append(f"{stage} {_ms(values, 50):.1f}/{_ms(values, 95):.1f}")
        print(f"  {name} path, ms p50/p95: " + ", ".join(cells))


def _pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    return float(low) / 1000, float(high or low) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--turns", type=int, default=None,
                        help="chat turns per client during the load (default: until the ingestion ends)")
    parser.add_argument("--seconds", type=float, default=420, help="longest load phase (default 420)")
    parser.add_argument("--baseline-turns", type=int, default=5, help="turns per client direct (default 5)")
    parser.add_argument("--doc-chars", type=int, default=6000, help="characters per document (default 6000)")
    parser.add_argument("--first-token-ms", type=_pair, default=(0.05, 0.15), metavar="LOW-HIGH",
                        help="a chat's first token after LOW-HIGH ms (default 50-150)")
    parser.add_argument("--token-ms", type=_pair, default=(0.010, 0.020), metavar="LOW-HIGH",
                        help="then a token every LOW-HIGH ms (default 10-20)")
    parser.add_argument("--extract-ms", type=float, default=200, help="structured extraction/summary reply (200)")
    parser.add_argument("--keyword-ms", type=float, default=100, help="keyword extraction reply (100)")
    parser.add_argument("--embed-ms", type=float, default=20, help="embedding reply (20)")
    parser.add_argument("--ingest-timeout", type=float, default=480)
    parser.add_argument("--set", action="append", default=[], metavar="GRAPHGATE_X=value",
                        help="extra gateway setting (repeatable), e.g. GRAPHGATE_LLM_CONCURRENCY=4")
    parser.add_argument("--keep-data", action="store_true", help="keep the data directory and gateway log")
    args = parser.parse_args(argv)
    config = LoadConfig(
        documents=args.documents, clients=args.clients, turns=args.turns, seconds=args.seconds,
        baseline_turns=args.baseline_turns, doc_chars=args.doc_chars, first_token=args.first_token_ms,
        token_interval=args.token_ms, extract_delay=args.extract_ms / 1000, keyword_delay=args.keyword_ms / 1000,
        embed_delay=args.embed_ms / 1000, ingest_timeout=args.ingest_timeout,
        gate_env=dict(item.split("=", 1) for item in args.set), keep_data=args.keep_data)
    result = run_load(config, progress=True)
    report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
