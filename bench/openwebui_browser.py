"""The Open WebUI end to end as a person goes through it (bench/openwebui_e2e.py's last part): its
own pages in Debian's headless chromium (driven by Playwright, as tests/test_console_browser.py
does), signed in as the admin, the model picker opened and a knowledge model picked from it, a
question typed and sent, the answer read off the page.

What reaches the upstream is then checked as for the API chats: the question's turn grounded in
the model's base only. A browser chat differs from the API ones in one way: Open WebUI 0.12 sends
its built-in tools (native function calling), so a model that calls one gets a second turn whose
last message is the tool's result; GraphGate forwards such a turn untouched (proxy/gateway/augment.py),
so it carries no context of either base. Its screenshots go to the directory given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from bench.openwebui_turns import (
    Report,
    around,
    is_task,
    last_message,
    text_of,
    upstream_chats,
    wait_for_upstream_chats,
)

if TYPE_CHECKING:
    from tests.fake_ollama import FakeOllama

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
TIMEOUT_MS = 30_000


def check_in_browser(report: Report, webui_url: str, token: str, fake: FakeOllama, *, kb: str, model: str,
                     listed: list[str], facts: dict[str, tuple[str, ...]], question: str,
                     screenshots: Path) -> None:
    """``listed``: the models the picker must show; ``model`` (of base ``kb``): the one chatted with."""
    if not report.check("a browser for Open WebUI's pages", os.path.exists(CHROMIUM),
                        "" if os.path.exists(CHROMIUM) else f"{CHROMIUM} is missing (apt-get install chromium)"):
        return
    screenshots.mkdir(parents=True, exist_ok=True)
    reply = "".join(fake.reply)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(base_url=webui_url, viewport={"width": 1280, "height": 800})
            # signed in, as after a login: the token is in place before any of the page's own scripts
            # runs (set from the /auth page once loaded instead, it raced with that page's start-up,
            # which could drop it on a busy machine: the model picker then never came)
            context.add_init_script(f"window.localStorage.setItem('token', {json.dumps(token)});")
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto("/")
            picker = page.locator("#model-selector-model-button")
            try:
                picker.wait_for()
            except PlaywrightTimeout:   # a fresh install's first page, on a busy machine: once more
                page.screenshot(path=str(screenshots / "first-load.png"))
                page.goto("/")
                picker.wait_for()
            release_notes = page.get_by_text("Okay, Let's Go!")   # shown once to a new user
            if release_notes.is_visible():
                release_notes.click()
            picker.click()
            menu = page.get_by_placeholder("Search a model")
            menu.wait_for()
            page.screenshot(path=str(screenshots / "model-picker.png"))
            missing = [name for name in listed if not page.get_by_text(name, exact=True).first.is_visible()]
            report.check("in the browser, Open WebUI's model picker shows " + ", ".join(listed), not missing,
                         f"missing: {missing}; screenshot {screenshots / 'model-picker.png'}")
            before = len(upstream_chats(fake))
            page.get_by_text(model, exact=True).first.click()
            page.locator("#chat-input").click()
            page.keyboard.type(question)
            page.keyboard.press("Enter")
            answered = True
            try:
                page.get_by_text(reply).first.wait_for()
            except PlaywrightTimeout:   # reported as a failed check below
                answered = False
            page.screenshot(path=str(screenshots / "chat.png"))
        finally:
            browser.close()
    if not report.check(f"in the browser, a chat with {model!r} shows the upstream's answer", answered,
                        f"screenshot {screenshots / 'chat.png'}"):
        return
    turns = wait_for_upstream_chats(fake, before, 4)
    asked = [t for t in turns if not is_task(t) and last_message(t).get("role") == "user"
             and last_message(t).get("content") == question]
    if not report.check(f"in the browser, the chat with {model!r}: its question reached the upstream once",
                        len(asked) == 1, f"{len(asked)} turns ending with the question of {len(turns)}"):
        return
    own = facts[kb]
    text = text_of(asked[0])
    report.check(f"in the browser, the chat with {model!r}: grounded in {kb} ({', '.join(own)} in the context)",
                 all(fact in text for fact in own), around(text, own[0]))
    others = [fact for base, known in facts.items() if base != kb for fact in known]
    leaked = [fact for turn in turns for fact in others if fact in text_of(turn)]
    report.check(f"in the browser, the chat with {model!r}: nothing of the other bases reached the upstream "
                 "in any of its turns", not leaked, f"leaked {leaked}" if leaked else f"{len(turns)} turns")
    every_fact = [fact for known in facts.values() for fact in known]
    tasks = [t for t in turns if is_task(t)]
    report.check(f"in the browser, the chat with {model!r}: its task calls ({len(tasks)}) went without context",
                 bool(tasks) and not any(fact in text_of(t) for t in tasks for fact in every_fact),
                 f"{len(tasks)} task calls")
    tool_turns = [t for t in turns if last_message(t).get("role") == "tool"]
    if tool_turns:   # Open WebUI offered its built-in tools and the model called one: the answer is written there
        report.check(f"in the browser, a tool continuation of the chat with {model!r} is grounded in {kb} too "
                     f"({len(tool_turns)} turn(s) ending with the tool's result)",
                     all(fact in text_of(t) for t in tool_turns for fact in own),
                     around(text_of(tool_turns[0]), own[0]))

