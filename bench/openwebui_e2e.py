"""Open WebUI end to end (issue 20, part 4): a real Open WebUI in front of a real GraphGate in front
of the fake Ollama of the tests, everything on 127.0.0.1, nothing changed on Open WebUI's side but
its Ollama connection (OLLAMA_BASE_URL = the gateway).

1. the fake Ollama (tests/fake_ollama.py, in a thread of this process, answering extraction like a
   perfect model on the test corpus) and a ``python -m proxy serve`` of this tree over it;
2. two knowledge bases whose documents share an entity (Alice Smith) with different facts: ``hr``
   (TEAM: she leads the Orion project) and ``legal`` (CLUB: she joined the Berlin chess club);
   one knowledge model (alias) on each;
3. Open WebUI (its own venv: ``--openwebui`` names its ``open-webui`` command) started offline in a
   temporary DATA_DIR, its first (admin) user signed up through its API;
4. the checks: (a) Open WebUI's model list (GET /api/models) holds both aliases and the plain
   models; (b) a chat with each alias through Open WebUI (POST /api/chat/completions) reached the
   upstream under the base model's name, grounded in its own base's facts and none of the other's;
   (c) Open WebUI's title task for that chat (POST /api/v1/tasks/title/completions) went upstream
   un-augmented, and GraphGate's trace says it skipped it as an Open WebUI task.

With ``--plain`` (a gateway without knowledge models), the chats use the plain model, grounded in
the default base (which then holds hr's document); legal's facts must still not reach it.

    python bench/openwebui_e2e.py --openwebui /work/owui-venv/bin/open-webui

Prints each check with PASS/FAIL and the timings (Open WebUI's start-up above all); exits 1 if a
check failed. tests/test_openwebui_e2e.py runs the same checks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.corpus import CLUB, PEOPLE, TEAM  # noqa: E402 - after the path is set
from tests.extractor import KnownFacts  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402
from tests.servers import Server, free_port  # noqa: E402

BASE_MODEL = "llama3.2:latest"
QUESTION = "What does Alice Smith do?"
# what only one base knows about the entity both share
FACTS = {"hr": ("Orion",), "legal": ("chess",)}
ALIASES = {"hr": "hr-assistant", "legal": "legal-assistant"}
OPENWEBUI_START_SECONDS = 180
ADMIN = {"name": "E2E Admin", "email": "admin@example.com", "password": "e2e-password-1"}


@dataclass
class Report:
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def failures(self) -> list[str]:
        return [f"{name}: {detail}" for name, ok, detail in self.checks if not ok]


# --- GraphGate: bases, documents, aliases -------------------------------------------------------

def ingest(gateway: httpx.Client, kb: str, name: str, text: str) -> None:
    if kb != "default":
        created = gateway.post("/rag/kbs", json={"name": kb})
        assert created.status_code == 201, f"POST /rag/kbs {kb}: {created.status_code} {created.text}"
    uploaded = gateway.post("/rag/documents", params={"kb": kb}, json={"name": name, "text": text})
    assert uploaded.status_code in (200, 202), f"upload to {kb}: {uploaded.status_code} {uploaded.text}"
    document_id = uploaded.json()["documents"][0]["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        document = gateway.get(f"/rag/documents/{document_id}", params={"kb": kb}).json()
        if document["status"] in ("processed", "failed"):
            assert document["status"] == "processed", f"{name} in {kb}: {document}"
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} in {kb} not processed within 60 s")


def make_alias(gateway: httpx.Client, alias: str, kb: str) -> None:
    made = gateway.put(f"/rag/models/{alias}", json={"model": BASE_MODEL, "kb": kb})
    assert made.status_code in (200, 201), f"PUT /rag/models/{alias}: {made.status_code} {made.text}"


def traces_of(gateway: httpx.Client, kb: str) -> list[dict[str, Any]]:
    response = gateway.get("/rag/traces", params={"kb": kb})
    assert response.status_code == 200, f"GET /rag/traces?kb={kb}: {response.status_code} {response.text}"
    return response.json()["traces"]


def wait_for_trace(gateway: httpx.Client, kb: str, seen: int, what: str) -> dict[str, Any]:
    """The newest trace of ``kb`` once there are more than ``seen`` (traces are written in the background)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        traces = traces_of(gateway, kb)
        if len(traces) > seen:
            return traces[0]
        time.sleep(0.1)
    raise AssertionError(f"no trace in {kb} for {what} within 15 s")


# --- Open WebUI ---------------------------------------------------------------------------------

def openwebui_environment(data_dir: Path, gateway_url: str, port: int) -> dict[str, str]:
    """Offline, nothing downloaded at run time: embeddings through the Ollama connection (so no
    sentence-transformers model is loaded), no OpenAI connection, no update check, no telemetry."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    return {**keep,
            "DATA_DIR": str(data_dir), "PORT": str(port),
            "WEBUI_SECRET_KEY": "graphgate-e2e-secret-key-for-a-throwaway-instance",
            "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "RAG_EMBEDDING_ENGINE": "ollama", "RAG_EMBEDDING_MODEL": "nomic-embed-text",
            "ENABLE_OLLAMA_API": "true", "OLLAMA_BASE_URL": gateway_url,
            "ENABLE_OPENAI_API": "false", "ENABLE_VERSION_UPDATE_CHECK": "false",
            "ENABLE_WEBSOCKET_SUPPORT": "false",
            "DO_NOT_TRACK": "true", "ANONYMIZED_TELEMETRY": "false", "SCARF_NO_ANALYTICS": "true",
            "GLOBAL_LOG_LEVEL": "WARNING"}


@contextlib.contextmanager
def openwebui(command: str, data_dir: Path, gateway_url: str, log_path: Path,
              report: Report) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen([command, "serve", "--host", "127.0.0.1", "--port", str(port)],
                                   env=openwebui_environment(data_dir, gateway_url, port), cwd=data_dir,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = began + OPENWEBUI_START_SECONDS
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                if process.poll() is not None:
                    raise RuntimeError(f"Open WebUI exited during start-up ({process.returncode}): see {log_path}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Open WebUI did not start in {OPENWEBUI_START_SECONDS} s: see {log_path}")
                time.sleep(0.2)
            report.timings["Open WebUI start-up (s)"] = time.monotonic() - began
            yield url
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def sign_up_admin(webui: httpx.Client) -> str:
    """The first user to sign up is Open WebUI's admin; its token authorises the API calls."""
    response = webui.post("/api/v1/auths/signup", json=ADMIN)
    assert response.status_code == 200, f"signup: {response.status_code} {response.text}"
    body = response.json()
    assert body.get("role") == "admin", f"the first user is not admin: {body}"
    return body["token"]


# --- the checks ---------------------------------------------------------------------------------

def upstream_chats(fake: FakeOllama) -> list[dict[str, Any]]:
    """The chat turns that reached the upstream (not GraphGate's own extraction and keyword calls,
    which ask for a JSON format)."""
    return [r.json for r in fake.requests_to("/api/chat") if isinstance(r.json, dict) and not r.json.get("format")]


def text_of(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request.get("messages") or [] if isinstance(m, dict))


def check_models(report: Report, webui: httpx.Client, targets: dict[str, str]) -> None:
    response = webui.get("/api/models")
    if not report.check("Open WebUI lists models (GET /api/models)", response.status_code == 200,
                        f"{response.status_code}"):
        return
    listed = {m["id"]: m for m in response.json()["data"]}
    for kb, model in targets.items():
        entry = listed.get(model)
        report.check(f"Open WebUI's model picker holds {model!r} (base {kb})",
                     entry is not None and entry.get("owned_by") == "ollama",
                     f"owned_by={entry.get('owned_by') if entry else None}; listed: {sorted(listed)}")
    report.check(f"Open WebUI's model picker holds the plain model {BASE_MODEL!r}", BASE_MODEL in listed,
                 f"listed: {sorted(listed)}")


def check_chat(report: Report, webui: httpx.Client, gateway: httpx.Client, fake: FakeOllama,
               kb: str, model: str, other: str) -> list[dict[str, Any]] | None:
    """A chat with ``model`` through Open WebUI, grounded in ``kb`` only; the messages of the turn."""
    before = len(upstream_chats(fake))
    traces_before = len(traces_of(gateway, kb))
    messages = [{"role": "user", "content": QUESTION}]
    began = time.monotonic()
    response = webui.post("/api/chat/completions", json={"model": model, "messages": messages, "stream": False})
    report.timings[f"chat with {model} through Open WebUI (s)"] = time.monotonic() - began
    if not report.check(f"chat with {model!r} through Open WebUI answers", response.status_code == 200,
                        f"{response.status_code} {response.text[:300]}"):
        return None
    answer = response.json()["choices"][0]["message"]["content"]
    sent = upstream_chats(fake)[before:]
    if not report.check(f"chat with {model!r}: one turn reached the upstream", len(sent) == 1,
                        f"{len(sent)} chat requests"):
        return None
    turn = sent[0]
    text = text_of(turn)
    report.check(f"chat with {model!r}: forwarded under the base model's name", turn.get("model") == BASE_MODEL,
                 f"model={turn.get('model')!r}")
    own, others = FACTS[kb], FACTS[other]
    report.check(f"chat with {model!r}: grounded in {kb} ({', '.join(own)} in the context)",
                 all(fact in text for fact in own), text[:400].replace("\n", " "))
    report.check(f"chat with {model!r}: nothing of {other} ({', '.join(others)}) reached the upstream",
                 not any(fact in text for fact in others), text[:400].replace("\n", " "))
    trace = wait_for_trace(gateway, kb, traces_before, f"the chat with {model}")
    report.check(f"chat with {model!r}: GraphGate's trace in {kb} says augmented", _augmented(trace),
                 _trace_summary(trace))
    return [*messages, {"role": "assistant", "content": answer}]


def check_title_task(report: Report, webui: httpx.Client, gateway: httpx.Client, fake: FakeOllama,
                     kb: str, model: str, messages: list[dict[str, Any]]) -> None:
    before = len(upstream_chats(fake))
    traces_before = len(traces_of(gateway, kb))
    response = webui.post("/api/v1/tasks/title/completions", json={"model": model, "messages": messages})
    if not report.check(f"title task for the chat with {model!r} answers", response.status_code == 200
                        and "choices" in response.json(), f"{response.status_code} {response.text[:300]}"):
        return
    sent = upstream_chats(fake)[before:]
    if not report.check(f"title task for {model!r}: one request reached the upstream", len(sent) == 1,
                        f"{len(sent)} chat requests"):
        return
    turn = sent[0]
    text = text_of(turn)
    report.check(f"title task for {model!r}: sent as Open WebUI rendered it (one user message, no context)",
                 [m.get("role") for m in turn["messages"]] == ["user"] and text.lstrip().startswith("### Task:")
                 and not any(fact in text for facts in FACTS.values() for fact in facts),
                 text[:200].replace("\n", " "))
    report.check(f"title task for {model!r}: forwarded under the base model's name", turn.get("model") == BASE_MODEL,
                 f"model={turn.get('model')!r}")
    trace = wait_for_trace(gateway, kb, traces_before, f"the title task of {model}")
    report.check(f"title task for {model!r}: GraphGate's trace says skipped as an Open WebUI task",
                 not _augmented(trace) and "background task (title" in json.dumps(trace), _trace_summary(trace))


def _augmented(trace: dict[str, Any]) -> bool:
    return bool(trace.get("augmented"))


def _trace_summary(trace: dict[str, Any]) -> str:
    return json.dumps({k: trace.get(k) for k in ("model", "augmented", "reason", "mode", "query")})[:300]


# --- the run ------------------------------------------------------------------------------------

def run(openwebui_command: str, *, plain: bool = False, keep: Path | None = None) -> Report:
    report = Report()
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="graphgate-owui-"))
    work.mkdir(parents=True, exist_ok=True)
    fake = FakeOllama()
    fake.structured = KnownFacts(PEOPLE)
    try:
        with fake.serve() as upstream:
            began = time.monotonic()
            server = Server(work / "graphgate", upstream, GRAPHGATE_KEYWORD_BUDGET="30")
            report.timings["GraphGate start-up (s)"] = time.monotonic() - began
            try:
                with httpx.Client(base_url=server.url, timeout=30) as gateway:
                    began = time.monotonic()
                    # the plain model is grounded in the default base: hr's facts go there instead
                    ingest(gateway, "default" if plain else "hr", "team.txt", TEAM)
                    ingest(gateway, "legal", "club.txt", CLUB)
                    report.timings["bases made and ingested (s)"] = time.monotonic() - began
                    if plain:
                        targets = {"default": BASE_MODEL}
                        FACTS["default"] = FACTS["hr"]
                    else:
                        for kb, alias in ALIASES.items():
                            make_alias(gateway, alias, kb)
                        targets = dict(ALIASES)
                    (work / "openwebui").mkdir(exist_ok=True)
                    with openwebui(openwebui_command, work / "openwebui", server.url, work / "openwebui.log",
                                   report) as webui_url, \
                            httpx.Client(base_url=webui_url, timeout=60) as webui:
                        webui.headers["Authorization"] = f"Bearer {sign_up_admin(webui)}"
                        check_models(report, webui, targets)
                        for kb, model in targets.items():
                            other = "legal" if kb != "legal" else "hr"
                            messages = check_chat(report, webui, gateway, fake, kb, model, other)
                            if messages is not None:
                                check_title_task(report, webui, gateway, fake, kb, model, messages)
            finally:
                server.stop()
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--openwebui", default=shutil.which("open-webui") or "open-webui",
                        help="Open WebUI's command (its own venv's bin/open-webui)")
    parser.add_argument("--plain", action="store_true",
                        help="no knowledge models: chat with the plain model over the default base")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (logs, data)")
    args = parser.parse_args()
    report = run(args.openwebui, plain=args.plain, keep=args.keep)
    print()
    for name, seconds in report.timings.items():
        print(f"{name}: {seconds:.2f}")
    passed = sum(ok for _, ok, _ in report.checks)
    print(f"{passed} passed, {len(report.checks) - passed} failed")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
