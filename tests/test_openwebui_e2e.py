"""Open WebUI end to end (issue 20, part 4), through bench/openwebui_e2e.py: a real Open WebUI, its
Ollama connection pointed at a real GraphGate over the fake Ollama, lists the knowledge models in
its model picker, a chat with each is grounded in its own base only and forwarded under the base
model's name, and its background tasks (title, tags, follow-ups) go upstream un-augmented; then
the same in its pages, in headless chromium (bench/openwebui_browser.py).

Open WebUI lives in a venv of its own (bench/openwebui_install.sh; .ci/run installs it), named by
GRAPHGATE_E2E_OPENWEBUI: the path of its ``open-webui`` command, or ``off`` to say that this
environment does not run the end to end (the test is then reported as skipped, with that reason).
Unset, or a path that is not there, fails the test rather than skipping it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.openwebui_e2e import run

SETTING = "GRAPHGATE_E2E_OPENWEBUI"
INSTALL = "bash bench/openwebui_install.sh VENV; then GRAPHGATE_E2E_OPENWEBUI=VENV/bin/open-webui"


def openwebui_command() -> str:
    value = os.environ.get(SETTING, "").strip()
    if value == "off":
        pytest.skip(f"{SETTING}=off: this environment does not run the Open WebUI end to end")
    if not value:
        pytest.fail(f"{SETTING} is not set: install Open WebUI ({INSTALL}), or set {SETTING}=off to say "
                    "that this environment does not run the end to end")
    if not os.access(value, os.X_OK) or not Path(value).is_file():
        pytest.fail(f"{SETTING}={value} is not an executable file ({INSTALL})")
    return value


def test_open_webui_lists_the_knowledge_models_grounds_their_chats_and_leaves_its_tasks_alone() -> None:
    report = run(openwebui_command())
    assert report.passed, "\n".join(report.failures())
    # what the checks covered: both aliases and the plain model listed; with each alias a new chat
    # as the front end starts one (its title, tags and follow-ups tasks) and a streamed API chat
    names = [name for name, _, _ in report.checks]
    assert sum("model picker holds" in name for name in names) == 3, names
    assert sum("nothing of the other bases" in name for name in names) == 5, names   # 2 new, 2 API, 1 browser
    assert sum("each task skipped as an Open WebUI task" in name for name in names) == 2, names
    assert sum("the answer came back through Open WebUI" in name for name in names) == 2, names
    assert sum("with the knowledge model's system prompt and options" in name for name in names) == 4, names
    # and in the browser: the picker showed the models, a chat typed in with one was answered and grounded
    assert any(name.startswith("in the browser, Open WebUI's model picker shows") for name in names), names
    assert sum(name.startswith("in the browser, the chat with") for name in names) == 4, names
    # its built-in tools: the model (the fake calls one when offered tools) is answered in a continuation,
    # grounded in the question's base too
    assert any(name.startswith("in the browser, a tool continuation") for name in names), names
