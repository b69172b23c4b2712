"""Turns that are not augmented: Open WebUI's background tasks recognised by their templates
(without the X-Task header), and a trace with a readable reason for every skipped turn.

The templates below are Open WebUI's defaults, verbatim from open-webui/open-webui
backend/open_webui/config.py (DEFAULT_*_PROMPT_TEMPLATE), and they are filled in the way
backend/open_webui/utils/task.py and utils/middleware.py fill them: {{MESSAGES:END:n}} becomes the
last n messages as "ROLE: content" lines, {{prompt}} the last user message, {{CURRENT_DATE}} the
date, {{TOOLS}} the tools' specs as JSON, {{responses}} the models' answers in triple quotes. Each
is sent the way Open WebUI sends it to an Ollama connection: one user message (the tool choice: its
template as the system message, the query as the user message), no X-Task header.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.core.settings import Settings
from tests.background import background_written
from tests.chat_helpers import MODEL, body, chats, ingest, traces
from tests.conftest import gateway_client
from tests.extractor import KnownFacts
from tests.fake_ollama import FakeOllama

pytestmark = pytest.mark.anyio

# ------------------------------------------------------------ Open WebUI's templates, verbatim

TITLE = """### Task:
Generate a concise title summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Keep it short: 2-4 words is best.
- Do not use emojis, quotation marks, or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over creativity.
- Your entire response must consist solely of the JSON object, without any introductory or concluding text.
- The output must be a single, raw JSON object, without any markdown code fences or other encapsulating text.
- Ensure no conversational text, affirmations, or explanations precede or follow the raw JSON output, as this will cause direct parsing failure.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "Stock Trends" },
- { "title": "Chocolate Chip Cookies" },
- { "title": "Music Streaming" },
- { "title": "Remote Work" }
### Chat History:
<chat_history>
{{MESSAGES:END:2}}
</chat_history>"""  # noqa: E501

TAGS = """### Task:
Generate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more specific subtopic tags.

### Guidelines:
- Start with high-level domains (e.g. Science, Technology, Philosophy, Arts, Politics, Business, Health, Sports, Entertainment, Education)
- Consider including relevant subfields/subdomains if they are strongly represented throughout the conversation
- If content is too short (less than 3 messages) or too diverse, use only ["General"]
- Use the chat's primary language; default to English if multilingual
- Prioritize accuracy over specificity

### Output:
JSON format: { "tags": ["tag1", "tag2", "tag3"] }

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""  # noqa: E501

IMAGE_PROMPT = """### Task:
Generate a detailed prompt for am image generation task based on the given language and context. Describe the image as if you were explaining it to someone who cannot see it. Include relevant details, colors, shapes, and any other important elements.

### Guidelines:
- Be descriptive and detailed, focusing on the most important aspects of the image.
- Avoid making assumptions or adding information not present in the image.
- Use the chat's primary language; default to English if multilingual.
- If the image is too complex, focus on the most prominent elements.

### Output:
Strictly return in JSON format:
{
    "prompt": "Your detailed description here."
}

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""  # noqa: E501

FOLLOW_UPS = """### Task:
Suggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.
### Guidelines:
- Write all follow-up questions from the user’s point of view, directed to the assistant.
- Make questions concise, clear, and directly related to the discussed topic(s).
- Only suggest follow-ups that make sense given the chat content and do not repeat what was already covered.
- If the conversation is very short or not specific, suggest more general (but relevant) follow-ups the user might ask.
- Use the conversation's primary language; default to English if multilingual.
- Response must be a JSON object with a "follow_ups" key containing an array of strings, no extra text or formatting.
### Output:
JSON format: { "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }
### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""  # noqa: E501

# Open WebUI 0.12's wording of the same task (seen by bench/openwebui_e2e.py against a real 0.12.4)
FOLLOW_UPS_0_12 = """### Task:
Predict 3-5 useful messages this user might naturally send next to advance their current objective.
### Guidelines:
- Write from the user's point of view, directed to the assistant. Match the user's directness, brevity, vocabulary, and latest language; do not deliberately copy typos.
- Suggest concrete actions, refinements, comparisons, or questions as appropriate. Do not force suggestions into question form.
- Response must be a JSON object with a "follow_ups" key containing an array of strings, no extra text or formatting.
### Output:
JSON format: { "follow_ups": ["Suggested next message 1", "Suggested next message 2", "Suggested next message 3"] }
### Chat History:
<chat_history>
{{MESSAGES:END:5}}
</chat_history>"""  # noqa: E501

QUERIES = """### Task:
Analyze the chat history to determine the necessity of generating search queries, in the given language. By default, **prioritize generating 1-3 broad and relevant search queries** unless it is absolutely certain that no additional information is required. The aim is to retrieve comprehensive, updated, and valuable information even with minimal uncertainty. If no search is unequivocally needed, return an empty list.

### Guidelines:
- Respond **EXCLUSIVELY** with a JSON object. Any form of extra commentary, explanation, or additional text is strictly prohibited.
- When generating search queries, respond in the format: { "queries": ["query1", "query2"] }, ensuring each query is distinct, concise, and relevant to the topic.
- If and only if it is entirely certain that no useful results can be retrieved by a search, return: { "queries": [] }.
- Err on the side of suggesting search queries if there is **any chance** they might provide useful or updated information.
- Be concise and focused on composing high-quality search queries, avoiding unnecessary elaboration, commentary, or assumptions.
- Today's date is: {{CURRENT_DATE}}.
- Always prioritize providing actionable and broad queries that maximize informational coverage.

### Output:
Strictly return in JSON format: 
{
  "queries": ["query1", "query2"]
}

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>
"""  # noqa: E501, W291

AUTOCOMPLETE = """### Task:
You are an autocompletion system. Continue the text in `<text>` based on the **completion type** in `<type>` and the given language.  

### **Instructions**:
1. Analyze `<text>` for context and meaning.  
2. Use `<type>` to guide your output:  
   - **General**: Provide a natural, concise continuation.  
   - **Search Query**: Complete as if generating a realistic search query.  
3. Start as if you are directly continuing `<text>`. Do **not** repeat, paraphrase, or respond as a model. Simply complete the text.  
4. Ensure the continuation:
   - Flows naturally from `<text>`.  
   - Avoids repetition, overexplaining, or unrelated ideas.  
5. If unsure, return: `{ "text": "" }`.  

### **Output Rules**:
- Respond only in JSON format: `{ "text": "<your_completion>" }`.

### **Examples**:
#### Example 1:  
Input:  
<type>General</type>  
<text>The sun was setting over the horizon, painting the sky</text>  
Output:  
{ "text": "with vibrant shades of orange and pink." }

#### Example 2:  
Input:  
<type>Search Query</type>  
<text>Top-rated restaurants in</text>  
Output:  
{ "text": "New York City for Italian cuisine." }  

---
### Context:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>
<type>{{TYPE}}</type>  
<text>{{PROMPT}}</text>  
#### Output:
"""  # noqa: E501, W291

TOOLS = """Available Tools: {{TOOLS}}

Your task is to choose and return the correct tool(s) from the list of available tools based on the query. Follow these guidelines:

- Return only the JSON object, without any additional text or explanation.

- If no tools match the query, return an empty array: 
   {
     "tool_calls": []
   }

- If one or more tools match the query, construct a JSON response containing a "tool_calls" array with objects that include:
   - "name": The tool's name.
   - "parameters": A dictionary of required parameters and their corresponding values.

The format for the JSON response is strictly:
{
  "tool_calls": [
    {"name": "toolName1", "parameters": {"key1": "value1"}},
    {"name": "toolName2", "parameters": {"key2": "value2"}}
  ]
}"""  # noqa: E501, W291

EMOJI = """Your task is to reflect the speaker's likely facial expression through a fitting emoji. Interpret emotions from the message and reflect their facial expression using fitting, diverse emojis (e.g., 😊, 😢, 😡, 😱).

Message: ```{{prompt}}```"""  # noqa: E501

MOA = """You have been provided with a set of responses from various models to the latest user query: "{{prompt}}"

Your task is to synthesize these responses into a single, high-quality response. It is crucial to critically evaluate the information provided in these responses, recognizing that some of it may be biased or incorrect. Your response should not simply replicate the given answers but should offer a refined, accurate, and comprehensive reply to the instruction. Ensure your response is well-structured, coherent, and adheres to the highest standards of accuracy and reliability.

Responses from models: {{responses}}"""  # noqa: E501

# ----------------------------------------------------- filled in as Open WebUI fills them in

# a chat about the test corpus: augmenting any of these tasks would find context
CONVERSATION = [
    {"role": "user", "content": "Who works at Acme Corp?"},
    {"role": "assistant", "content": "Alice Smith and Bob Jones work at Acme Corp."},
    {"role": "user", "content": "Where is Acme Corp based, and who leads it?"},
]
PROMPT = CONVERSATION[-1]["content"]


def messages_content(messages: list[dict[str, Any]]) -> str:
    """utils/misc.py get_messages_content."""
    return "\n".join(f"{m['role'].upper()}: {m['content']}" for m in messages)


def fill(template: str, messages: list[dict[str, Any]] | None = CONVERSATION, prompt: str = PROMPT,
         **variables: str) -> str:
    """utils/task.py: {{MESSAGES:END:n}}, {{prompt}} (any case), {{CURRENT_DATE}}, then the rest."""
    text = re.sub(r"\{\{MESSAGES:END:(\d+)\}\}",
                  lambda m: messages_content(messages[-int(m.group(1)):]) if messages is not None else "", template)
    text = re.sub(r"(?i)\{\{prompt\}\}", lambda _: prompt, text)
    text = text.replace("{{CURRENT_DATE}}", "2025-11-02")
    for name, value in variables.items():
        text = text.replace("{{" + name + "}}", value)
    return text


def user_task(content: str, *, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": stream, **extra}


TOOL_SPECS = [{"name": "get_weather", "description": "The weather in a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def tools_task() -> dict[str, Any]:
    """utils/middleware.py get_tools_function_calling_payload: the template as the system message,
    the recent history and the query as the user message."""
    history = "\n".join(f'{m["role"].upper()}: """{m["content"]}"""' for m in CONVERSATION[:-1])
    return {"model": MODEL, "stream": False, "messages": [
        {"role": "system", "content": fill(TOOLS, TOOLS=json.dumps(TOOL_SPECS))},
        {"role": "user", "content": f"History:\n{history}\nQuery: {PROMPT}"}]}


MOA_RESPONSES = ["Acme Corp is in Berlin; Alice Smith leads it.", "Berlin. Its CEO is Alice Smith."]

TASKS = [
    ("title", user_task(fill(TITLE), options={"num_predict": 1000})),
    ("tags", user_task(fill(TAGS))),
    ("follow-ups", user_task(fill(FOLLOW_UPS))),
    ("query generation", user_task(fill(QUERIES))),
    ("image prompt", user_task(fill(IMAGE_PROMPT))),
    ("autocomplete", user_task(fill(AUTOCOMPLETE, TYPE="General", prompt="Who leads Acme"))),
    ("emoji", user_task(fill(EMOJI), options={"num_predict": 4})),
    ("mixture of agents", user_task(fill(MOA, responses="\n\n".join(f'"""{r}"""' for r in MOA_RESPONSES)),
                                    stream=True)),
    ("tools function calling", tools_task()),
]


# --------------------------------------------------------------------------------- the tests

@pytest.fixture
async def gw(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> AsyncIterator[httpx.AsyncClient]:
    async with gateway_client(settings, fake) as client:
        await ingest(client)
        yield client


async def send(client: httpx.AsyncClient, fake: FakeOllama, facts: KnownFacts, request: dict[str, Any], *,
               path: str = "/api/chat", headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, Any]]:
    """Send a turn; check it reached the upstream byte for byte with no retrieval on the way; its trace."""
    raw = json.dumps(request, ensure_ascii=False).encode()
    keyword_calls, embeds = facts.calls.count("keywords"), len(fake.requests_to("/api/embed"))
    response = await client.post(path, content=raw, headers=headers or {})
    assert response.status_code == 200, response.text
    assert chats(fake)[-1].body == raw  # unchanged: no system message, no context
    assert facts.calls.count("keywords") == keyword_calls  # no keyword call to the model
    assert len(fake.requests_to("/api/embed")) == embeds  # no retrieval at all
    trace = (await traces(client))[0]
    prompt = request["messages"][-1]["content"]  # this turn's, kept short (the template is several KB)
    assert trace["query"] == (prompt if len(prompt) <= 200 else prompt[:200] + "…")
    assert not trace["augmented"]
    return raw, trace


@pytest.mark.parametrize(("task", "request_body"), TASKS, ids=[t for t, _ in TASKS])
async def test_open_webui_task_templates_are_not_augmented(gw: httpx.AsyncClient, fake: FakeOllama, facts: KnownFacts,
                                                           task: str, request_body: dict[str, Any]) -> None:
    _, trace = await send(gw, fake, facts, request_body)
    assert trace["reason"] == f"background task ({task}, recognised by its template)"
    assert trace["detail"] == {"task": task, "recognised_by": "template"}
    assert trace["model"] == MODEL and trace["api"] == "ollama"
    prompt = request_body["messages"][-1]["content"]  # kept short: the template is several KB
    assert trace["query"] == (prompt if len(prompt) <= 200 else prompt[:200] + "…")


async def test_open_webui_0_12_follow_ups_template_is_named(gw: httpx.AsyncClient, fake: FakeOllama,
                                                              facts: KnownFacts) -> None:
    _, trace = await send(gw, fake, facts, user_task(fill(FOLLOW_UPS_0_12)))
    assert trace["reason"] == "background task (follow-ups, recognised by its template)"


async def test_a_task_over_the_openai_api_is_recognised_too(gw: httpx.AsyncClient, fake: FakeOllama,
                                                             facts: KnownFacts) -> None:
    _, trace = await send(gw, fake, facts, user_task(fill(EMOJI), max_tokens=4), path="/v1/chat/completions")
    assert trace["api"] == "openai" and trace["reason"] == "background task (emoji, recognised by its template)"


async def test_a_task_after_the_models_own_system_prompt_is_recognised(gw: httpx.AsyncClient, fake: FakeOllama,
                                                                        facts: KnownFacts) -> None:
    """Open WebUI puts a workspace model's system prompt before the task (or, for the tool choice,
    in front of the template in the same system message)."""
    titled = user_task(fill(TITLE))
    titled["messages"].insert(0, {"role": "system", "content": "You are a helpful assistant."})
    _, trace = await send(gw, fake, facts, titled)
    assert trace["reason"] == "background task (title, recognised by its template)"
    tools = tools_task()
    tools["messages"][0]["content"] = "You are a helpful assistant.\n" + tools["messages"][0]["content"]
    await send(gw, fake, facts, tools)
    assert (await traces(gw))[0]["reason"] == "background task (tools function calling, recognised by its template)"


async def test_a_first_turn_task_with_no_history_is_recognised(gw: httpx.AsyncClient, fake: FakeOllama,
                                                               facts: KnownFacts) -> None:
    """Autocompletion without messages: {{MESSAGES:END:6}} becomes nothing; the tool choice on a
    chat's first message has no "History:"."""
    _, trace = await send(gw, fake, facts, user_task(fill(AUTOCOMPLETE, messages=None, TYPE="Search Query",
                                                          prompt="Acme Corp")))
    assert trace["reason"] == "background task (autocomplete, recognised by its template)"
    tools = tools_task()
    tools["messages"][1]["content"] = "Query: Who works at Acme Corp?"
    await send(gw, fake, facts, tools)


async def test_the_task_header_still_wins(gw: httpx.AsyncClient, fake: FakeOllama, facts: KnownFacts) -> None:
    _, trace = await send(gw, fake, facts, body(), headers={"x-task": "title_generation"})
    assert trace["reason"] == "background task (title_generation, from the X-Task header)"
    assert trace["detail"] == {"task": "title_generation", "recognised_by": "X-Task header"}


@pytest.mark.parametrize("question", [
    "Where is Acme Corp based, and who leads it?",
    "### Task: find out who works at Acme Corp",
    "### Task: who works at Acme Corp, and what do <chat_history> and </chat_history> mean in a prompt?",
    "Your task is to reflect on what Acme Corp does. Message: ```Who works there?```",
    "Query: who works at Acme Corp?",
])
async def test_ordinary_questions_are_still_augmented(gw: httpx.AsyncClient, fake: FakeOllama,
                                                      question: str) -> None:
    response = await gw.post("/api/chat", json=body(question))
    assert response.status_code == 200
    sent = chats(fake)[-1].json["messages"]
    assert sent[0]["role"] == "system" and "Acme Corp" in sent[0]["content"]
    assert sent[1:] == [{"role": "user", "content": question}]
    [trace] = await traces(gw)
    assert trace["augmented"] and trace["reason"] is None


async def test_a_template_inside_a_conversation_is_an_ordinary_question(gw: httpx.AsyncClient,
                                                                       fake: FakeOllama) -> None:
    """A user pasting a task template into a running chat is asking something: augmented."""
    request = {"model": MODEL, "stream": False,
               "messages": [*CONVERSATION[:2], {"role": "user", "content": fill(TITLE)}]}
    await gw.post("/api/chat", json=request)
    assert chats(fake)[-1].json["messages"][0]["role"] == "system"
    [trace] = await traces(gw)
    assert trace["augmented"]


async def test_a_model_the_upstream_cannot_show_is_forwarded_and_traced(
        gw: httpx.AsyncClient, fake: FakeOllama, facts: KnownFacts, caplog: pytest.LogCaptureFixture) -> None:
    request = {**body(), "model": "mystery-model:7b"}
    raw = json.dumps(request).encode()
    keyword_calls = facts.calls.count("keywords")
    with caplog.at_level(logging.INFO, logger="graphgate.augment"):
        response = await gw.post("/api/chat", content=raw)
    assert response.status_code == 404 and "not found" in response.json()["error"]  # the upstream's own answer
    assert chats(fake)[-1].body == raw
    assert [r.json for r in fake.requests_to("/api/show")][-1]["model"] == "mystery-model:7b"
    assert facts.calls.count("keywords") == keyword_calls
    [trace] = await traces(gw)
    assert not trace["augmented"] and trace["model"] == "mystery-model:7b"
    assert trace["reason"].startswith("/api/show failed for model 'mystery-model:7b': ")
    assert "not found" in trace["reason"]
    [line] = [r for r in caplog.records if r.name == "graphgate.augment" and "mystery-model:7b" in r.getMessage()]
    assert line.levelno == logging.WARNING and "/api/show" in line.getMessage() and "not found" in line.getMessage()


@pytest.mark.parametrize(("case", "request_body", "headers", "reason"), [
    ("load", {"model": MODEL, "messages": []}, {}, "no messages (model load or unload)"),
    ("assistant last", {"model": MODEL, "stream": False, "messages": [
        {"role": "user", "content": "Tell me about Acme Corp"}, {"role": "assistant", "content": "Acme is"}]}, {},
     "continuation of an assistant message"),
    ("tool result with no question", {"model": MODEL, "stream": False, "messages": [
        {"role": "system", "content": "You call tools."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"}]}, {}, "tool result with no question before it"),
    ("embedding model", {"model": "nomic-embed-text:latest", "stream": False,
                         "messages": [{"role": "user", "content": "Acme Corp?"}]}, {},
     "model 'nomic-embed-text:latest' cannot chat (capabilities: embedding)"),
    ("bypass header", body(), {"x-graphgate-mode": "bypass"}, "bypass mode (from the X-GraphGate-Mode header)"),
])
async def test_every_other_skipped_turn_leaves_a_trace(gw: httpx.AsyncClient, fake: FakeOllama, case: str,
                                                       request_body: dict[str, Any], headers: dict[str, str],
                                                       reason: str) -> None:
    raw = json.dumps(request_body).encode()
    await gw.post("/api/chat", content=raw, headers=headers)
    assert chats(fake)[-1].body == raw, case
    [trace] = await traces(gw)
    assert not trace["augmented"] and trace["reason"] == reason, case


async def test_bypass_prefix_and_setting_are_traced(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings.replace(mode="bypass"), fake) as client:
        await ingest(client)
        await client.post("/api/chat", json=body())
        await client.post("/api/chat", json=body("/bypass Who works at Acme Corp?"))
        assert [m["role"] for m in chats(fake)[-1].json["messages"]] == ["user"]
        recorded = await traces(client)
    assert sorted((t["reason"], t["mode"], t["query"], t["augmented"]) for t in recorded) == [
        ("bypass mode (from GRAPHGATE_MODE)", "bypass", "Who works at Acme Corp?", False),
        ("bypass mode (from the /bypass prefix)", "bypass", "Who works at Acme Corp?", False)]


async def test_an_empty_knowledge_base_is_traced(settings: Settings, fake: FakeOllama, facts: KnownFacts) -> None:
    async with gateway_client(settings, fake) as client:
        raw = json.dumps(body()).encode()
        await client.post("/api/chat", content=raw)
        assert chats(fake)[-1].body == raw
        [trace] = await traces(client)
    assert not trace["augmented"] and trace["reason"] == "the knowledge base is empty (no processed documents)"


async def test_skipped_turns_show_their_reason_in_the_console(gw: httpx.AsyncClient, fake: FakeOllama,
                                                              facts: KnownFacts) -> None:
    await send(gw, fake, facts, user_task(fill(EMOJI)))
    await gw.post("/api/chat", json={**body(), "model": "mystery-model:7b"})
    await background_written()   # the traces are kept in the background
    page = (await gw.get("/admin/chats")).text
    assert "background task (emoji, recognised by its template)" in page
    assert "/api/show failed for model &#39;mystery-model:7b&#39;" in page
    ids = re.findall(r'<tr data-id="(\d+)"', page)
    assert len(ids) == 2
    detail = (await gw.get(f"/admin/chats/{ids[1]}")).text
    assert "<dt>Reason</dt><dd>background task (emoji, recognised by its template)</dd>" in detail
    assert "Your task is to reflect the speaker&#39;s likely facial expression" in detail
