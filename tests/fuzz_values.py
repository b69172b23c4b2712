"""Values the fuzzers send and look for: strings with a lone UTF-16 surrogate, and JSON bytes
written as a client's JSON encoder writes them."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

from hypothesis import strategies as st

# a lone UTF-16 surrogate: valid JSON once escaped ("\\ud800"), not valid Unicode; GraphGate answers 400
lone_surrogates = st.builds(lambda a, code, b: a + chr(code) + b, st.text(max_size=8), st.integers(0xD800, 0xDFFF),
                            st.text(max_size=8))

_SURROGATE = re.compile("[\ud800-\udfff]")


def json_bytes(value: Any) -> bytes:
    """UTF-8 JSON; a surrogate is written as its escape, as a client's JSON encoder does (raw, it
    would be bad UTF-8, which tests/test_fuzz_api.py's ``raw_bodies`` sends as well)."""
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def lone_surrogate_in(raw: bytes | None) -> bool:
    """Whether ``raw`` is a JSON object holding a lone surrogate in a key or string."""
    try:
        stack = [json.loads(raw)] if raw else []
    except (ValueError, RecursionError):
        return False
    if not stack or not isinstance(stack[0], dict):
        return False
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if any(_SURROGATE.search(k) for k in value):
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and _SURROGATE.search(value):
            return True
    return False


# --------------------------------------------------------------------------- deep nesting (issue 29)

# depths on both sides of Python's recursion limit (1000, less the frames already on the stack): a
# parser that recurses gives up somewhere between 900 and 1000; 100,000 is far past any bound
DEPTHS = (100, 500, 900, 1000, 3000, 100_000)
NESTINGS = ("[", "{", "{[")  # arrays, objects, objects of arrays


def deep(depth: int, nesting: str) -> str:
    """JSON text ``depth`` levels deep: ``[[[...]]]``, ``{"a":{"a":...1}}`` or ``{"a":[{"a":[...1]}]}``."""
    if nesting == "[":
        return "[" * depth + "]" * depth
    if nesting == "{":
        return '{"a":' * depth + "1" + "}" * depth
    half = depth // 2
    return '{"a":[' * half + "1" + "]}" * half


def deep_object(depth: int, nesting: str) -> str:
    """Deep JSON that is an object at its top (what a filter, metadata or options field expects)."""
    text = deep(depth, nesting)
    return text if text.startswith("{") else '{"a":' + text + "}"


deep_texts = st.builds(deep, st.sampled_from(DEPTHS), st.sampled_from(NESTINGS))

URL_BYTES = 60_000  # a URL longer than 64 KiB is refused by the client itself (and by any server)


def in_url(raw: str, bound: int = URL_BYTES) -> str:
    """Deep JSON that fits in a URL (``bound`` bytes encoded): as deep as asked, or as deep as fits."""
    depth = raw.count("[") + raw.count("{")
    nesting = "{[" if '{"a":[' in raw else "{" if raw.startswith("{") else "["
    while len(urlencode({"filter": raw})) > bound:
        depth = depth * 2 // 3
        raw = deep(depth, nesting)
    return raw
deep_objects = st.builds(deep_object, st.sampled_from(DEPTHS), st.sampled_from(NESTINGS))


def with_raw(value: dict[str, Any], key: str, raw: str) -> bytes:
    """``value`` as JSON bytes with ``key`` set to the JSON text ``raw``, written as it is (a deep
    value that Python's own encoder could not write)."""
    rest = {k: v for k, v in value.items() if k != key}
    head = json_bytes(rest)[:-1]
    return head + (b"," if rest else b"") + json.dumps(key).encode() + b":" + raw.encode() + b"}"


def deep_reply(body: bytes, raw: str) -> bytes:
    """An upstream's reply with the deep JSON ``raw`` in every JSON object it holds: each line of
    NDJSON or SSE (``data: {...}``) that is an object gets one more field, ``"zz": raw``; the reply
    keeps every field a reader expects."""
    out = []
    for line in body.split(b"\n"):
        stripped = line.rstrip(b"\r")
        if stripped.endswith(b"}") and (stripped.startswith(b"{") or stripped.startswith(b"data: {")):
            closing = b"" if stripped.endswith(b"{}") else b","
            stripped = stripped[:-1] + closing + b'"zz":' + raw.encode() + b"}"
        out.append(stripped)
    return b"\n".join(out)


def deep_content(body: bytes, raw: str) -> bytes:
    """An upstream's chat reply whose text (``message.content``, ``response``, an OpenAI choice's
    content) is the deep JSON ``raw``: a model answering GraphGate's structured calls (keywords,
    extraction) with it."""
    out = []
    for line in body.split(b"\n"):
        head, _, rest = line.partition(b"data: ") if line.startswith(b"data: ") else (b"", b"", line)
        try:
            value = json.loads(rest)
        except ValueError:
            out.append(line)
            continue
        holders = [value, *(value.get("choices") or [])] if isinstance(value, dict) else []
        for holder in holders:
            for key in ("message", "delta"):
                if isinstance(holder, dict) and isinstance(holder.get(key), dict) and "content" in holder[key]:
                    holder[key]["content"] = raw
            if isinstance(holder, dict) and isinstance(holder.get("response"), str):
                holder["response"] = raw
            if isinstance(holder, dict) and isinstance(holder.get("text"), str):
                holder["text"] = raw
        out.append((b"data: " if head or line.startswith(b"data: ") else b"") + json.dumps(value).encode())
    return b"\n".join(out)
