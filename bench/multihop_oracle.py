"""Oracle extraction for the multi-hop recall bench: the fake upstream's structured answers, as a
perfect model would give them on the bench's world.

Every known name in a sentence becomes an entity of its type, described by that sentence; a
sentence that states a fact of the world becomes that relation, with the relation kind's keywords;
two names together in any other sentence (one cut by a chunk boundary, say) are related loosely,
as a model would. Summaries keep every distinct note, as the summary prompt asks. Keyword calls
get the names in the latest question (the bench gives its oracle keywords in the request, so they
are rarely asked).

It writes in the documents' language (the world's keywords; the descriptions are the passage's own
sentences) and reads unspaced text too: a Chinese sentence ends at its full-width stop, and a name
in Chinese characters is found wherever it stands (the world's Chinese names are never inside one
another, nor spelt by other words), while a Latin name must not continue a Latin word. A chunk may
begin or end anywhere, even inside a name: the cut sentence states no fact, and a cut name is no name.
"""

from __future__ import annotations

import functools
import json
import re
from itertools import pairwise
from typing import Any

from bench.multihop_world import World

PASSAGE = re.compile(r"<<<\n(.*)\n>>>", re.S)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")
UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")  # CJK scripts
NOT_AFTER, NOT_BEFORE = r"(?<![^\W\u3040-\u9fff\uac00-\ud7af])", r"(?![^\W\u3040-\u9fff\uac00-\ud7af])"
FULL_STOPS = ("。", "！", "？")


def name_pattern(names: list[str]) -> re.Pattern[str]:
    """One group, the longest name first: an end in a CJK script needs no boundary, a Latin end must not
    touch another letter or digit of a spaced script (CJK text may follow: "Kazor Systems的总部"). Names
    with the same kinds of ends share their boundaries, which keeps the regex fast over long lists."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name in sorted(names, key=len, reverse=True):
        ends = ("" if UNSPACED.match(name[0]) else NOT_AFTER, "" if UNSPACED.match(name[-1]) else NOT_BEFORE)
        groups.setdefault(ends, []).append(re.escape(name))
    return re.compile("(" + "|".join(f"{lead}(?:{'|'.join(alternatives)}){trail}"
                                     for (lead, trail), alternatives in groups.items()) + ")")


@functools.lru_cache(maxsize=100_000)
def _one_name(name: str) -> re.Pattern[str]:
    return name_pattern([name])


def holds(text: str, name: str) -> bool:
    """Whether ``name`` stands in ``text`` as a name (not inside a longer Latin word)."""
    return _one_name(name).search(text) is not None


class OracleExtractor:
    def __init__(self, world: World) -> None:
        self.types = world.types
        self.facts = world.by_sentence()
        self.keywords, self.loose = world.relation_keywords, list(world.loose_keywords)
        self.pattern = name_pattern(list(world.types))

    def __call__(self, request: dict[str, Any]) -> str:
        properties = (request.get("format") or {}).get("properties") or {}
        user = next((m.get("content", "") for m in reversed(request["messages"]) if m.get("role") == "user"), "")
        if "summary" in properties:
            return json.dumps({"summary": self.summary(user)})
        if "low_level_keywords" in properties:
            latest = user.rpartition("Latest question:")[2]
            return json.dumps({"high_level_keywords": [], "low_level_keywords": self.names_in(latest)})
        if "already found" in user:  # a gleaning pass: the first reading missed nothing
            return json.dumps({"entities": [], "relations": []})
        match = PASSAGE.search(user)
        return json.dumps(self.extract(match.group(1) if match else user))

    def names_in(self, text: str) -> list[str]:
        return list(dict.fromkeys(self.pattern.findall(text)))

    def extract(self, passage: str) -> dict[str, list[dict[str, Any]]]:
        entities: dict[str, dict[str, Any]] = {}
        relations: list[dict[str, Any]] = []
        for sentence in (s.strip() for s in SENTENCE_END.split(passage)):
            names = self.names_in(sentence)
            for name in names:
                entities.setdefault(name, {"name": name, "type": self.types[name], "description": sentence})
            fact = self.facts.get(sentence)
            if fact is not None:
                relations.append({"source": fact.source, "target": fact.target,
                                  "keywords": list(self.keywords[fact.kind]), "description": sentence, "weight": 8})
            else:
                relations.extend({"source": a, "target": b, "keywords": self.loose,
                                  "description": sentence, "weight": 2} for a, b in pairwise(names))
        return {"entities": list(entities.values()), "relations": relations}

    @staticmethod
    def summary(user: str) -> str:
        notes = [line[2:].strip() for line in user.splitlines() if line.startswith("- ")]
        unspaced = bool(notes) and all(note.endswith(FULL_STOPS) for note in notes)   # Chinese: joined without spaces
        return ("" if unspaced else " ").join(dict.fromkeys(notes))
