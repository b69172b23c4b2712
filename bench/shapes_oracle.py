"""Oracle extraction for the many-shapes bench (bench/shapes_world.py): the fake upstream's answers
as a good model would give them under GraphGate's extraction prompt and schema, perfect by default,
noisy when asked.

It answers what proxy/extraction/prompts.py asks for and nothing more: entities with name, type and
description, relations with source, target, keywords, description and weight. The schema has no
attribute field, so an attribute (a founding year, a headcount, a revenue, a sector) reaches the
graph the way the prompt lets a model put it: in the description of the entity it is about ("what
the passage tells about the entity", one to three sentences). A description here is the passage's
sentences about the entity, those stating its attributes first, at most three; a relation is each
one a sentence states, with its kind's keywords and the sentence as description. A name that only
introduces another name's abbreviation ("Kravon Brothers (KVB)") is no entity of its own there: the
model reads one company, and the sentence stays in its description; the graph links the two names
only if GraphGate does. Two names in a sentence that states nothing (one cut by a chunk boundary)
are related loosely, as in bench/multihop_oracle.py, whose request dispatch, summaries and name
matching this reuses.

``Noise(seed)`` makes it a sloppier model, deterministically per seed and passage (whatever order
the chunks come in): 15 % of the entities of a passage are written another way everywhere in its
answer (a case change; for a company a legal form "Inc.", "Ltd" or "GmbH", or a leading "The ";
for a product a leading "The "; in the Chinese world bench/shapes_zh.variants: traditional characters,
a legal form dropped or added, another dot or none in a person's name, 市 after a city, a product in
quotation marks), and 10 % of its relations are left out.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from bench.multihop_oracle import SENTENCE_END, OracleExtractor, name_pattern
from bench.shapes_world import ShapesWorld

DESCRIPTION_SENTENCES = 3   # the prompt: "in one to three sentences"


@dataclass(frozen=True)
class Noise:
    seed: int = 32
    variant_share: float = 0.15
    drop_share: float = 0.10

    def rng(self, passage: str) -> random.Random:
        return random.Random(f"{self.seed}:{hashlib.sha256(passage.encode()).hexdigest()}")

    @staticmethod
    def variants(name: str, kind: str, language: str = "en") -> list[str]:
        if language == "zh":
            from bench.shapes_zh import variants

            return variants(name, kind)
        cased = [name.upper(), name.lower()]
        if kind == "Organization":
            return [*cased, f"{name} Inc.", f"{name} Ltd", f"{name} GmbH", f"The {name}"]
        if kind == "Artifact":
            return [*cased, f"The {name}"]
        return cased


class ShapesExtractor(OracleExtractor):
    """bench/multihop_oracle.OracleExtractor's dispatch (extraction, gleaning, summaries, keywords)
    over the many-shapes world's statements."""

    def __init__(self, world: ShapesWorld, noise: Noise | None = None) -> None:   # not the base's: another world
        self.types = world.names
        self.statements = world.by_sentence()
        self.keywords, self.loose = world.relation_keywords, list(world.loose_keywords)
        self.pattern = name_pattern(list(world.names))
        self.noise = noise
        self.language, self.joiner = world.language, world.wording.joiner

    def extract(self, passage: str) -> dict[str, list[dict[str, Any]]]:
        notes: dict[str, list[tuple[int, int, str]]] = {}   # name -> (0 about it / 1 naming it, order, sentence)
        relations: list[dict[str, Any]] = []
        for order, sentence in enumerate(s.strip() for s in SENTENCE_END.split(passage)):
            statement = self.statements.get(sentence)
            names = [n for n in self.names_in(sentence) if not statement or n not in statement.aliases]
            for name in names:
                notes.setdefault(name, []).append((0 if statement and name in statement.about else 1, order, sentence))
            if statement is not None and statement.relations:
                relations += [{"source": r.source, "target": r.target, "keywords": list(self.keywords[r.kind]),
                               "description": sentence, "weight": 8} for r in statement.relations]
            elif statement is None:
                relations += [{"source": a, "target": b, "keywords": self.loose, "description": sentence,
                               "weight": 2} for a, b in pairwise(names)]
        entities = [{"name": name, "type": self.types[name],
                     "description": self.joiner.join(s for _, _, s in sorted(found)[:DESCRIPTION_SENTENCES])}
                    for name, found in notes.items()]
        result = {"entities": entities, "relations": relations}
        return self.garble(passage, result) if self.noise else result

    def garble(self, passage: str, result: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        """The passage's answer as the noisy model writes it: some names another way, some relations gone."""
        assert self.noise is not None
        rng = self.noise.rng(passage)
        written = {}   # every relation's ends are entities of the passage too
        for entity in result["entities"]:
            if rng.random() < self.noise.variant_share:
                written[entity["name"]] = rng.choice(Noise.variants(entity["name"], entity["type"], self.language))
        entities = [entity | {"name": written.get(entity["name"], entity["name"])} for entity in result["entities"]]
        relations = [relation | {"source": written.get(relation["source"], relation["source"]),
                                 "target": written.get(relation["target"], relation["target"])}
                     for relation in result["relations"] if rng.random() >= self.noise.drop_share]
        return {"entities": entities, "relations": relations}
