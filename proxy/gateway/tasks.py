"""Open WebUI's background tasks, recognised so that the chat pipeline forwards them untouched."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from proxy.core.messages import message_text

if TYPE_CHECKING:
    from proxy.gateway.chat import ChatTurn

# Open WebUI asks the chat model for titles, tags, follow-ups, search/retrieval queries, emojis,
# autocompletions, image prompts, tool choices and mixture-of-agents merges. None of these are
# questions for the knowledge base: augmenting them costs a keyword call and retrieval, and puts
# context where Open WebUI expects bare JSON. Open WebUI marks them on the wire only when told to
# (the X-Task header through OLLAMA_API_CONFIGS, see docs/clients.md; it drops `metadata.task` before
# sending), so they are also recognised by the text of its default templates (config.py), as
# backend/open_webui/utils/task.py renders them: {{MESSAGES:END:n}} becomes "ROLE: content" lines,
# {{prompt}}/{{PROMPT}}, {{TYPE}}, {{CURRENT_DATE}}, {{TOOLS}} and {{responses}} are filled in.
#
# Conservative on purpose: only fixed sentences of the templates are matched, never the variable
# parts, and only in the place Open WebUI puts them (the turn's one user message, after nothing but
# system messages; for tool choice, the system message). Someone typing "### Task: ..." in a chat
# is still augmented: the "### Task:" shape also needs Open WebUI's rendered <chat_history> block
# ("USER: ..." lines, or nothing), which prose does not contain.

_TASK_HEADING = "### Task:"
_CHAT_HISTORY = re.compile(r"<chat_history>(.*?)</chat_history>", re.S)
_RENDERED_HISTORY = re.compile(r"\A\s*(?:\Z|[A-Z][A-Z_]*: )")  # empty, or get_messages_content's "ROLE: ..."
# which "### Task:" template, from its task line (the first paragraph under the heading); the
# phrases hold for the current defaults and for the older ones (e.g. "Generate a concise, 3-5 word
# title with an emoji ..."), and are tried in this order
_TASK_LINES = (
    ("autocomplete", re.compile(r"\bautocompletion system\b", re.I)),
    # "Suggest 3-5 relevant follow-up questions ..." until 0.11; "Predict 3-5 useful messages this
    # user might naturally send next ..." in 0.12
    ("follow-ups", re.compile(r"\bfollow-up questions\b|\bmight naturally send next\b", re.I)),
    ("tags", re.compile(r"\btags\b", re.I)),
    ("query generation", re.compile(r"\bsearch queries\b", re.I)),
    ("image prompt", re.compile(r"\bimage generation\b", re.I)),
    ("title", re.compile(r"\btitle\b", re.I)),
)
_EMOJI_OPENING = "Your task is to reflect the speaker's likely facial expression through a fitting emoji."
_EMOJI_MESSAGE = re.compile(r"\n\s*Message: ```.*```\s*\Z", re.S)
_MOA_OPENING = "You have been provided with a set of responses from various models to the latest user query: \""
_MOA_TASK = "Your task is to synthesize these responses into a single, high-quality response."
_MOA_RESPONSES = "\nResponses from models: "
_TOOLS_HEADING = "Available Tools: "
_TOOLS_TASK = ("Your task is to choose and return the correct tool(s) from the list of available tools "
               "based on the query.")
_TOOLS_QUERY = re.compile(r"\A(?:Query: |History:\n.*\nQuery: )", re.S)  # old and current shapes


def _task_template(text: str) -> str | None:
    """Which Open WebUI task a user message's text is the rendered template of, if any."""
    text = text.lstrip()
    if text.startswith(_TASK_HEADING):
        history = _CHAT_HISTORY.search(text)
        if history is None or not _RENDERED_HISTORY.match(history.group(1)):
            return None
        task_line = text[len(_TASK_HEADING):].strip().split("\n\n", 1)[0].split("\n#", 1)[0]
        return next((name for name, pattern in _TASK_LINES if pattern.search(task_line)), "'### Task:' template")
    if text.startswith(_EMOJI_OPENING) and _EMOJI_MESSAGE.search(text):
        return "emoji"
    if text.startswith(_MOA_OPENING) and _MOA_TASK in text and _MOA_RESPONSES in text:
        return "mixture of agents"
    return None


def _tools_template(text: str) -> bool:
    """Open WebUI's tool-choice template, in a system message (maybe after the model's own prompt)."""
    heading = text.find(_TOOLS_HEADING)
    return heading >= 0 and _TOOLS_TASK in text[heading:] and '"tool_calls"' in text[heading:]


def recognise_task(turn: ChatTurn) -> tuple[str, str] | None:
    """(task, how it was recognised) for an Open WebUI background task, or None. The X-Task
    header wins; its templates are the fallback."""
    task = turn.headers.get("x-task", "").strip()
    if task and not task.startswith("{{"):  # an unsubstituted template means "no task"
        return task, "X-Task header"
    messages = turn.messages
    if not messages or not all(isinstance(m, dict) for m in messages):
        return None
    *before, last = messages
    if last.get("role") != "user" or any(m.get("role") != "system" for m in before):
        return None  # a task is one user message, after at most system messages
    text = message_text(last)
    name = _task_template(text)
    if name is None and before and _TOOLS_QUERY.match(text) and any(_tools_template(message_text(m))
                                                                      for m in before):
        name = "tools function calling"
    return (name, "template") if name else None


# a task's trace keeps the start of its prompt: the rest is Open WebUI's template and a copy of the
# chat history, several KB each, four or five times per chat turn
TASK_QUERY_CHARS = 200


def describe_task(task: str, how: str) -> str:
    source = "from the X-Task header" if how == "X-Task header" else "recognised by its template"
    return f"background task ({task}, {source})"
