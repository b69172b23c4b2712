"""The linked-entities channel: the entities the question names, found by name in the store's name
index (no model call, no vector), then their edges, most central first (or, with the
``relation_ranking`` knob at ``question``, most relevant to the question first). It runs when the
``linking`` knob is on; it needs no keywords, so it grounds a turn with ``keywords=off`` too.

The recent user turns are linked as well, after the question's own names and at a discount: a
follow-up ("and where is it based?") keeps the entity the conversation is about.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from proxy.retrieval import search
from proxy.retrieval.found import Found
from proxy.retrieval.params import QueryParams
from proxy.retrieval.select import relation_match
from proxy.retrieval.stages import Question
from proxy.text.word_forms import cut_names, relation_words

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

TURN_DISCOUNT = 0.5   # a name from an earlier turn counts half as much as one in the question
# a named hub's relations are many, and the kind asked for may only show once the keywords' themes
# are in (the evidence ranking, after fusion): more of them than the other channels give are kept
RELATIONS_PER_TOP_K = 4


def linked_keys(store: RetrievalReads, question: Question) -> dict[str, float]:
    """Entity key -> confidence: the question's names, then the earlier turns' (newest first).
    Worked out once per question and view of the store (the linked, expansion and described
    channels all ask); each caller gets its own copy."""
    memo = ("linked", id(store))
    if memo not in question.memo:
        question.memo[memo] = _linked(store, question)
    return dict(question.memo[memo])


def _linked(store: RetrievalReads, question: Question) -> dict[str, float]:
    linked = dict(store.link_sync(question.text))
    weight = 1.0
    for turn in reversed(question.turns):
        weight *= TURN_DISCOUNT
        for key, score in store.link_sync(turn):
            linked.setdefault(key, score * weight)
    return linked


class LinkedChannel:
    name = "linked"
    vector = "query"   # it searches no index; the question's own vector is always there

    def enabled(self, params: QueryParams) -> bool:
        return params.linking == "on"

    def search(self, store: RetrievalReads, question: Question) -> Found:
        params = question.params
        linked = linked_keys(store, question)
        keys = sorted(linked, key=lambda k: -linked[k])[:params.top_k]   # stable: the text's order within ties
        found = search.entities_by_name(store, keys)
        degree = store.degrees_sync(list(found))
        entities = []
        for key in keys:
            if key in found:
                entity = found[key]
                entity.score, entity.degree = linked[key], degree[key]
                entities.append(entity)
        return Found(entities, search.central_incident_relations(
            store, [e.key for e in entities], RELATIONS_PER_TOP_K * params.top_k, asked_kind(question, tuple(linked))))


def asked_kind(question: Question, named: tuple[str, ...] = ()) -> Callable[[Sequence[str], str, str], float] | None:
    """How a linked entity's relations rank, by the ``relation_ranking`` knob: the most central
    first (None), or those whose keywords hold the question's relation words first (a hub's
    hundreds of relations hide the asked kind). Keywords only: a hub's relations are not built,
    read or embedded per turn; the kept ones are ranked again with their descriptions and vectors
    after the fusion (the evidence layout). ``named``: the entities the question names, whose names
    are no relation words."""
    if question.params.relation_ranking != "question":
        return None
    asked = cut_names(question.asked, named)
    return lambda keywords, source, target: relation_match(relation_words(asked, (source, target)), keywords, "",
                                                           (source, target))
