"""A scripted 'model' for the fake upstream's structured outputs.

It extracts the way a perfect model would on a corpus whose entities the test declares: every
declared name found in a sentence becomes an entity described by that sentence; two names in
one sentence become a relation. Names in ``held_back`` are only reported by a gleaning pass, so
tests can see gleaning at work. Summary requests get a deterministic summary.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# a word character of a spaced script: CJK characters are \w too, but no boundary is needed against them
_SPACED_WORD = r"[^\W\u3040-\u30ff\u3400-\u9fff]"
_NOT_IN_A_WORD_BEFORE = rf"(?<!{_SPACED_WORD})"
_NOT_IN_A_WORD_AFTER = rf"(?!{_SPACED_WORD})"


def _passage(text: str) -> str:
    match = re.search(r"<<<\n(.*)\n>>>", text, re.S)
    return match.group(1) if match else text


@dataclass
class KnownFacts:
    entities: dict[str, str]                       # name -> type
    held_back: set[str] = field(default_factory=set)
    weight: float = 1.0
    calls: list[str] = field(default_factory=list)  # "extract" | "glean" | "summary", in order
    malformed: int = 0                              # answer this many extraction calls with broken JSON
    no_keywords: bool = False                       # keyword requests get empty lists

    def __call__(self, request: dict[str, Any]) -> str:
        schema = request.get("format") or {}
        user = next((m.get("content", "") for m in reversed(request["messages"]) if m.get("role") == "user"), "")
        if "summary" in (schema.get("properties") or {}):
            self.calls.append("summary")
            return self._summary(user)
        if "low_level_keywords" in (schema.get("properties") or {}):
            self.calls.append("keywords")
            return json.dumps(self.keywords(user))
        gleaning = "already found" in user
        self.calls.append("glean" if gleaning else "extract")
        if self.malformed > 0 and not gleaning:
            self.malformed -= 1
            return '{"entities": [{"name": "broken"'
        return json.dumps(self.extract(_passage(user), gleaning=gleaning))

    def sentences(self, passage: str) -> list[str]:
        return [s.strip() for s in re.split(r"(?<=[.!?])\s+|(?<=[。！？])|\n+", passage) if s.strip()]

    def names_in(self, sentence: str) -> list[str]:
        """The declared names the sentence holds as words: not inside a longer word of a spaced script
        ("Bob" is not in "Bobby"); a script written without spaces (Chinese) is no boundary to need, so
        "奥巴尼克斯" is in "奥巴尼克斯创立了…" and "Zorvel Systems" in "Zorvel Systems的总部"."""
        return [n for n in self.entities if re.search(rf"{_NOT_IN_A_WORD_BEFORE}{re.escape(n)}{_NOT_IN_A_WORD_AFTER}",
                                                      sentence)]

    def extract(self, passage: str, *, gleaning: bool) -> dict[str, list[dict[str, Any]]]:
        entities: list[dict[str, Any]] = []
        relations: list[dict[str, Any]] = []
        for sentence in self.sentences(passage):
            names = self.names_in(sentence)
            for name in names:
                if (name in self.held_back) == gleaning:
                    entities.append({"name": name, "type": self.entities[name], "description": sentence})
            if not gleaning:
                for i, a in enumerate(names):
                    for b in names[i + 1:]:
                        relations.append({"source": a, "target": b, "keywords": ["mentioned together"],
                                          "description": sentence, "weight": self.weight})
        return {"entities": entities, "relations": relations}

    def keywords(self, user: str) -> dict[str, list[str]]:
        """Names in the latest question; for a question without one ("and who leads it?"), the most
        recent name of the earlier turns, as a model resolving the reference would."""
        earlier, _, latest = user.rpartition("Latest question:")
        low = self.names_in(latest)
        if not low and earlier:
            mentioned = [(earlier.rfind(n), n) for n in self.entities if n in earlier]
            low = [max(mentioned)[1]] if mentioned else []
        if self.no_keywords:
            return {"high_level_keywords": [], "low_level_keywords": []}
        high = ["organisation"] if "organi" in latest.lower() else []
        return {"high_level_keywords": high, "low_level_keywords": low}

    @staticmethod
    def _summary(user: str) -> str:
        subject = user.split("\n", 1)[0].removeprefix("Subject: ").strip()
        notes = [line[2:] for line in user.splitlines() if line.startswith("- ")]
        return json.dumps({"summary": f"{subject}: " + " ".join(notes[:2]) + f" (+{len(notes) - 2} more)"})
