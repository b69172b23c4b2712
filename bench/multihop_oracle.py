"""Oracle extraction for the multi-hop recall bench: the fake upstream's structured answers, as a
perfect model would give them on the bench's world.

Every known name in a sentence becomes an entity of its type, described by that sentence; a
sentence that states a fact of the world becomes that relation, with the relation kind's keywords;
two names together in any other sentence (one cut by a chunk boundary, say) are related loosely,
as a model would. Summaries keep every distinct note, as the summary prompt asks. Keyword calls
get the names in the latest question (the bench gives its oracle keywords in the request, so they
are rarely asked).
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
from typing import Any

from bench.multihop_world import RELATIONS, World

PASSAGE = re.compile(r"<<<\n(.*)\n>>>", re.S)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


class OracleExtractor:
    def __init__(self, world: World) -> None:
        self.types = world.types
        self.facts = world.by_sentence()
        names = sorted(world.types, key=len, reverse=True)
        self.pattern = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, names)) + r")(?!\w)")

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
                                  "keywords": list(RELATIONS[fact.kind][1]), "description": sentence, "weight": 8})
            else:
                relations.extend({"source": a, "target": b, "keywords": ["mentioned together"],
                                  "description": sentence, "weight": 2} for a, b in pairwise(names))
        return {"entities": list(entities.values()), "relations": relations}

    @staticmethod
    def summary(user: str) -> str:
        notes = [line[2:].strip() for line in user.splitlines() if line.startswith("- ")]
        return " ".join(dict.fromkeys(notes))
