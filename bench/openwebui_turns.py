"""What the Open WebUI end to end reads and reports (bench/openwebui_e2e.py, bench/openwebui_browser.py):
the chat turns that reached the fake upstream, what they hold, and the report of the checks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tests.fake_ollama import FakeOllama


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



def upstream_chats(fake: FakeOllama) -> list[dict[str, Any]]:
    """The chat turns that reached the upstream (not GraphGate's own extraction and keyword calls,
    which ask for a JSON format)."""
    return [r.json for r in fake.requests_to("/api/chat") if isinstance(r.json, dict) and not r.json.get("format")]


def wait_for_upstream_chats(fake: FakeOllama, before: int, count: int, seconds: float = 30) -> list[dict[str, Any]]:
    """The chat turns after the first ``before``, once there are ``count`` (or what came in ``seconds``),
    and a moment more so that an unexpected extra one is seen too."""
    deadline = time.monotonic() + seconds
    while len(upstream_chats(fake)) - before < count and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    return upstream_chats(fake)[before:]


def text_of(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in request.get("messages") or [] if isinstance(m, dict))


def is_task(turn: dict[str, Any]) -> bool:
    """One of Open WebUI's task prompts, as it renders them: one user message under a '### Task:'
    heading (after the knowledge model's system prompt, if it has one: a Modelfile's SYSTEM applies
    to every request with the model's name)."""
    *before, last = turn.get("messages") or [{}]
    return (all(m.get("role") == "system" for m in before) and last.get("role") == "user"
            and str(last.get("content", "")).lstrip().startswith("### Task:"))


def last_message(turn: dict[str, Any]) -> dict[str, Any]:
    messages = turn.get("messages") or [{}]
    return messages[-1] if isinstance(messages[-1], dict) else {}


def task_line(turn: dict[str, Any]) -> str:
    prompt = str(turn["messages"][-1].get("content", ""))
    return prompt.lstrip().removeprefix("### Task:").strip().split("\n", 1)[0][:60]


def around(text: str, word: str, width: int = 100) -> str:
    """The text around the first ``word`` in it (what the detail of a check shows)."""
    at = text.find(word)
    snippet = text[max(0, at - width):at + width] if at >= 0 else text[:2 * width]
    return snippet.replace("\n", " ")
