"""Open WebUI end to end (issue 20, part 4): a real Open WebUI in front of a real GraphGate in front
of the fake Ollama of the tests, everything on 127.0.0.1, nothing changed on Open WebUI's side but
its Ollama connection (OLLAMA_BASE_URL = the gateway).

1. the fake Ollama (tests/fake_ollama.py, in a thread of this process, answering extraction like a
   perfect model on the test corpus) and a ``python -m proxy serve`` of this tree over it;
2. two knowledge bases whose documents share an entity (Alice Smith) with different facts: ``hr``
   (TEAM: she leads the Orion project) and ``legal`` (CLUB: she joined the Berlin chess club);
   one knowledge model (alias) on each, with its own system prompt and temperature;
3. Open WebUI (its own venv: ``--openwebui`` names its ``open-webui`` command) started offline in a
   temporary DATA_DIR, its first (admin) user signed up through its API;
4. the checks: (a) Open WebUI's model list (GET /api/models) holds both aliases, as Ollama models,
   and the plain model; with each alias (b) a new chat started as Open WebUI's front end starts
   one (POST /api/chat/completions with its background tasks: title, tags, follow-ups): the chat
   turn reached the upstream under the base model's name, with the alias's system prompt and
   options, grounded in its own base's facts and none of the other's; the three task calls went
   as Open WebUI rendered them, un-augmented; GraphGate's traces in that base say so (the chat
   augmented under the alias's name, the three tasks skipped as Open WebUI tasks); Open WebUI
   saved the answer in its chat and titled it; (c) a streamed chat through its OpenAI-style API
   (no chat kept): the upstream's reply comes back, the turn grounded as in (b).

With ``--plain``, no knowledge models: the chats use the plain model, grounded in the default base
(GRAPHGATE_PLAIN_MODEL_KB's default), which then holds hr's document; legal's facts must still not
reach it.

    bash bench/openwebui_install.sh /tmp/owui      # its own venv, once (~90 s, 1.3 GB)
    python bench/openwebui_e2e.py --openwebui /tmp/owui/bin/open-webui

Prints each check with PASS/FAIL and the timings (Open WebUI's start-up above all); exits 1 if a
check failed. tests/test_openwebui_e2e.py runs the same checks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.openwebui_browser import check_in_browser  # noqa: E402 - after the path is set
from bench.openwebui_turns import (  # noqa: E402
    Report,
    around,
    is_task,
    task_line,
    text_of,
    upstream_chats,
    wait_for_upstream_chats,
)
from tests.corpus import CLUB, PEOPLE, TEAM  # noqa: E402
from tests.extractor import KnownFacts  # noqa: E402
from tests.fake_ollama import FakeOllama  # noqa: E402
from tests.servers import Server, free_port  # noqa: E402

BASE_MODEL = "llama3.2:latest"
QUESTION = "What does Alice Smith do?"
BROWSER_QUESTION = "Who is Alice Smith?"
# what only one base knows about the entity both share
FACTS: dict[str, tuple[str, ...]] = {"hr": ("Orion",), "legal": ("chess",)}
ALIASES = {"hr": "hr-assistant", "legal": "legal-assistant"}
# each alias's own system prompt and options (a Modelfile's SYSTEM and PARAMETER): they must reach the
# upstream with its chats
SYSTEMS = {"hr": "You answer questions about the HR handbook.", "legal": "You answer questions about contracts."}
TEMPERATURES = {"hr": 0.25, "legal": 0.75}
OPENWEBUI_START_SECONDS = 180
ADMIN = {"name": "E2E Admin", "email": "admin@example.com", "password": "e2e-password-1"}


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
    made = gateway.put(f"/rag/models/{alias}", json={"model": BASE_MODEL, "kb": kb, "system": SYSTEMS[kb],
                                                       "options": {"temperature": TEMPERATURES[kb]}})
    assert made.status_code in (200, 201), f"PUT /rag/models/{alias}: {made.status_code} {made.text}"


def traces_of(gateway: httpx.Client, kb: str) -> list[dict[str, Any]]:
    response = gateway.get("/rag/traces", params={"kb": kb})
    assert response.status_code == 200, f"GET /rag/traces?kb={kb}: {response.status_code} {response.text}"
    return response.json()["traces"]


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

# what Open WebUI's own front end asks for with a new chat: it then sends the title task at once,
# beside the chat, and the follow-ups and tags tasks after the answer
UI_TASKS = {"title_generation": True, "tags_generation": True, "follow_up_generation": True}


def check_models(report: Report, webui: httpx.Client, targets: dict[str, str]) -> None:
    response = webui.get("/api/models")
    if not report.check("Open WebUI lists models (GET /api/models)", response.status_code == 200,
                        f"{response.status_code}"):
        return
    listed = {m["id"]: m for m in response.json()["data"]}
    for kb, model in targets.items():
        entry = listed.get(model)
        report.check(f"Open WebUI's model picker holds {model!r} (base {kb}) as an Ollama model",
                     entry is not None and entry.get("owned_by") == "ollama",
                     f"owned_by={entry.get('owned_by') if entry else None}; listed: {sorted(listed)}")
    report.check(f"Open WebUI's model picker holds the plain model {BASE_MODEL!r}", BASE_MODEL in listed,
                 f"listed: {sorted(listed)}")


def check_grounding(report: Report, what: str, turn: dict[str, Any], kb: str,
                    facts: dict[str, tuple[str, ...]], *, alias: bool) -> None:
    """The turn went upstream under the base model's name with ``kb``'s facts and no other base's
    (and, for a knowledge model, with its system prompt and options)."""
    text = text_of(turn)
    if alias:
        options = turn.get("options") or {}
        report.check(f"{what}: with the knowledge model's system prompt and options",
                     SYSTEMS[kb] in text and not any(SYSTEMS[other] in text for other in SYSTEMS if other != kb)
                     and options.get("temperature") == TEMPERATURES[kb],
                     f"system prompt {'in' if SYSTEMS[kb] in text else 'NOT in'} the turn, options {options}")
    report.check(f"{what}: forwarded under the base model's name", turn.get("model") == BASE_MODEL,
                 f"model={turn.get('model')!r}")
    own = facts[kb]
    report.check(f"{what}: grounded in {kb} ({', '.join(own)} in the context)",
                 all(fact in text for fact in own), around(text, own[0]))
    others = [fact for base, known in facts.items() if base != kb for fact in known]
    leaked = [fact for fact in others if fact in text]
    report.check(f"{what}: nothing of the other bases ({', '.join(others)}) reached the upstream",
                 not leaked, f"leaked {leaked}: {around(text, leaked[0])}" if leaked else "")


def new_traces(gateway: httpx.Client, kb: str, before: int, count: int) -> list[dict[str, Any]]:
    """The traces of ``kb`` after the first ``before``, once there are ``count`` (written in the background)."""
    deadline = time.monotonic() + 15
    while True:
        traces = traces_of(gateway, kb)
        if len(traces) - before >= count or time.monotonic() > deadline:
            return traces[:len(traces) - before]   # newest first
        time.sleep(0.1)


def check_ui_chat(report: Report, webui: httpx.Client, gateway: httpx.Client, fake: FakeOllama,
                  kb: str, model: str, facts: dict[str, tuple[str, ...]]) -> None:
    """A new chat as Open WebUI's front end starts one (its background tasks asked for): the chat
    turn grounded in ``kb`` only, its title, tags and follow-ups tasks un-augmented, and the answer
    saved in Open WebUI's chat."""
    what = f"new chat with {model!r} as Open WebUI's front end starts one"
    chats_before = {c["id"] for c in webui.get("/api/v1/chats/").json()}
    before = len(upstream_chats(fake))
    traces_before = len(traces_of(gateway, kb))
    user_id, assistant_id = str(uuid.uuid4()), str(uuid.uuid4())
    body = {"model": model, "stream": True, "parent_id": None, "id": assistant_id,
            "messages": [{"role": "user", "content": QUESTION}],
            "user_message": {"id": user_id, "parentId": None, "childrenIds": [assistant_id], "role": "user",
                             "content": QUESTION, "timestamp": int(time.time()), "models": [model]},
            "background_tasks": UI_TASKS, "features": {}, "params": {}}
    began = time.monotonic()
    response = webui.post("/api/chat/completions", json=body)
    if not report.check(f"{what}: accepted", response.status_code == 200,
                        f"{response.status_code} {response.text[:300]}"):
        return
    turns = wait_for_upstream_chats(fake, before, 1 + len(UI_TASKS))
    report.timings[f"new chat with {model}: its turn and tasks upstream (s)"] = time.monotonic() - began
    chats = [t for t in turns if not is_task(t)]
    tasks = [t for t in turns if is_task(t)]
    if not report.check(f"{what}: one chat turn and {len(UI_TASKS)} task calls reached the upstream",
                        len(chats) == 1 and len(tasks) == len(UI_TASKS),
                        f"{len(chats)} chat turns, tasks: {[task_line(t) for t in tasks]}"):
        return
    check_grounding(report, what, chats[0], kb, facts, alias=model != BASE_MODEL)
    report.check(f"{what}: the task calls went under the base model's name",
                 all(t.get("model") == BASE_MODEL for t in tasks), f"{[t.get('model') for t in tasks]}")
    every_fact = [fact for known in facts.values() for fact in known]
    augmented = [task_line(t) for t in tasks if any(fact in text_of(t) for fact in every_fact)]
    report.check(f"{what}: the task calls went as Open WebUI rendered them (no context)", not augmented,
                 f"with context: {augmented}" if augmented else "; ".join(task_line(t) for t in tasks))
    traces = new_traces(gateway, kb, traces_before, 1 + len(UI_TASKS))
    grounded = [t for t in traces if t.get("augmented")]
    skipped = [str(t.get("reason")) for t in traces if not t.get("augmented")]
    report.check(f"{what}: GraphGate's traces in {kb}: the chat augmented under its name, "
                 "each task skipped as an Open WebUI task",
                 len(grounded) == 1 and grounded[0].get("query") == QUESTION and grounded[0].get("model") == model
                 and len(skipped) == len(UI_TASKS)
                 and sorted(skipped) == sorted(f"background task ({task}, recognised by its template)"
                                               for task in ("title", "tags", "follow-ups")),
                 f"augmented: {[(t.get('model'), t.get('query')) for t in grounded]}; skipped: {skipped}")
    new_chats = [c["id"] for c in webui.get("/api/v1/chats/").json() if c["id"] not in chats_before]
    if not report.check(f"{what}: Open WebUI saved the chat", len(new_chats) == 1, f"new chats: {new_chats}"):
        return
    reply = "".join(fake.reply)
    deadline = time.monotonic() + 10
    while True:
        chat = webui.get(f"/api/v1/chats/{new_chats[0]}").json()["chat"]
        saved = chat.get("history", {}).get("messages", {}).get(assistant_id, {})
        if saved.get("content") == reply or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    report.check(f"{what}: the answer came back through Open WebUI (saved in its chat, titled)",
                 saved.get("content") == reply and bool(chat.get("title")) and chat.get("title") != "New Chat",
                 f"answer {saved.get('content')!r}, title {chat.get('title')!r}")


def check_api_chat(report: Report, webui: httpx.Client, fake: FakeOllama,
                   kb: str, model: str, facts: dict[str, tuple[str, ...]]) -> None:
    """A chat through Open WebUI's OpenAI-style API (streamed, no chat kept): grounded in ``kb`` only."""
    what = f"API chat with {model!r} (streamed)"
    before = len(upstream_chats(fake))
    began = time.monotonic()
    answer = []
    with webui.stream("POST", "/api/chat/completions",
                      json={"model": model, "stream": True, "messages": [{"role": "user", "content": QUESTION}]}) as r:
        status = r.status_code
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[len("data: "):]).get("choices") or []:
                    answer.append((choice.get("delta") or {}).get("content") or "")
    report.timings[f"API chat with {model} through Open WebUI (s)"] = time.monotonic() - began
    reply = "".join(fake.reply)
    if not report.check(f"{what}: answered with the upstream's reply", status == 200 and "".join(answer) == reply,
                        f"{status} {''.join(answer)!r}"):
        return
    turns = wait_for_upstream_chats(fake, before, 1)
    if report.check(f"{what}: one turn reached the upstream", len(turns) == 1, f"{len(turns)} chat turns"):
        check_grounding(report, what, turns[0], kb, facts, alias=model != BASE_MODEL)


# --- the run ------------------------------------------------------------------------------------

def run(openwebui_command: str, *, plain: bool = False, browser: bool = True, keep: Path | None = None) -> Report:
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
                    facts: dict[str, tuple[str, ...]]
                    if plain:
                        targets = {"default": BASE_MODEL}
                        facts = {"default": FACTS["hr"], "legal": FACTS["legal"]}
                    else:
                        facts = dict(FACTS)
                        for kb, alias in ALIASES.items():
                            make_alias(gateway, alias, kb)
                        # made as "hr-assistant", listed (as by Ollama) and picked as "hr-assistant:latest"
                        targets = {kb: f"{alias}:latest" for kb, alias in ALIASES.items()}
                    (work / "openwebui").mkdir(exist_ok=True)
                    with openwebui(openwebui_command, work / "openwebui", server.url, work / "openwebui.log",
                                   report) as webui_url, \
                            httpx.Client(base_url=webui_url, timeout=60) as webui:
                        token = sign_up_admin(webui)
                        webui.headers["Authorization"] = f"Bearer {token}"
                        check_models(report, webui, targets)
                        for kb, model in targets.items():
                            check_ui_chat(report, webui, gateway, fake, kb, model, facts)
                            check_api_chat(report, webui, fake, kb, model, facts)
                        if browser:
                            kb, model = next(iter(targets.items()))
                            check_in_browser(report, webui_url, token, fake, kb=kb, model=model,
                                             listed=list(dict.fromkeys([*targets.values(), BASE_MODEL])),
                                             facts=facts, question=BROWSER_QUESTION,
                                             screenshots=work / "screenshots")
            finally:
                server.stop()
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--openwebui", default=os.environ.get("GRAPHGATE_E2E_OPENWEBUI") or "open-webui",
                        help="Open WebUI's command, its own venv's bin/open-webui (bench/openwebui_install.sh); "
                             "default: $GRAPHGATE_E2E_OPENWEBUI, or open-webui on the PATH")
    parser.add_argument("--plain", action="store_true",
                        help="no knowledge models: chat with the plain model over the default base")
    parser.add_argument("--no-browser", action="store_true",
                        help="leave out the part in headless chromium (the model picker, a chat typed in)")
    parser.add_argument("--keep", type=Path,
                        help="work in this directory and keep it (logs, data, the browser's screenshots)")
    args = parser.parse_args()
    # stopped (timeout, kill): unwind, so that Open WebUI and the gateway are stopped with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = run(args.openwebui, plain=args.plain, browser=not args.no_browser, keep=args.keep)
    print()
    for name, seconds in report.timings.items():
        print(f"{name}: {seconds:.2f}")
    passed = sum(ok for _, ok, _ in report.checks)
    print(f"{passed} passed, {len(report.checks) - passed} failed")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
