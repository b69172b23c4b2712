"""The evidence order (the ``context_layout`` knob at ``evidence``): the fused relations ranked by
one yardstick, whichever channel found them, so that a small budget is spent on the facts that
answer the question.

A relation scores its relevance to the question (``relation_relevance``: the question's relation
words in its keywords and description, plus a little of its vector's cosine), plus ``ANCHOR`` when
one of its entities is one the question names (the linked entities). A relation that touches no
named entity is the question's next hop: it is judged by the words the named entities' best
relation has not answered yet, and inherits the anchor in the measure that relation answers the
question (the chain answers more of it than a named entity's unasked-for facts); and so on along
the chain, hop by hop (a 3-hop question's third fact is judged by what the first two left). So in "where is
the company that acquired X headquartered?", X's acquisition answers "acquired", and the acquirer's
headquarters outranks its other acquisitions and X's facts that answer nothing; in "which products
does Y develop?", Y's products come before anyone else's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.retrieval.found import FoundEntity, FoundRelation
from proxy.retrieval.relevance import cosines, hop_confidence, relation_relevance, unanswered
from proxy.retrieval.select import described_stems, word_stems
from proxy.retrieval.stages import Question

if TYPE_CHECKING:
    from proxy.store.protocols.retrieval import RetrievalReads

ANCHOR = 1.0   # a named entity's own relation outranks any other equally relevant one


def rank_evidence(store: RetrievalReads, question: Question, relations: list[FoundRelation],
                  anchors: dict[str, float], shortlist: int | None = None,
                  vectors: bool = True) -> list[FoundRelation]:
    """``relations`` best evidence first (ties: their fused order). ``anchors``: the named entities'
    keys and their linking confidence. With ``shortlist``, they are first ranked by their keywords
    and vectors alone and only that many are read (descriptions) and kept. Without ``vectors`` the
    relations' vectors are not read (their cosine counts for little)."""
    if not relations:
        return relations
    # read once, for both passes below (without ``vectors``, under a burst: words alone)
    sims = cosines(store, question, relations) if vectors else {}
    if shortlist is not None and len(relations) > shortlist:
        quick = evidence_scores(store, question, relations, anchors, sims, descriptions=False)
        top = sorted(range(len(relations)), key=lambda i: (-quick[relations[i].pair], i))[:shortlist]
        relations = [relations[i] for i in sorted(top)]   # the fused order among them, for the ties
    scores = evidence_scores(store, question, relations, anchors, sims, descriptions=True)
    order = {r.pair: i for i, r in enumerate(relations)}
    return sorted(relations, key=lambda r: (-scores[r.pair], order[r.pair]))


def evidence_scores(store: RetrievalReads, question: Question, relations: list[FoundRelation],
                    anchors: dict[str, float], sims: dict[str, float], *, descriptions: bool) -> dict[str, float]:
    """Each relation's evidence score by pair: its relevance plus the anchor of a named entity it
    touches; a relation further along a chain from a named entity, hop by hop, by what the path
    reaching it left unanswered, plus the anchor it inherits along that path (``chain_anchor``).
    Without ``descriptions``, what is in memory alone (keywords, vectors): the shortlist's pass."""
    relevance = dict(zip((r.pair for r in relations),
                         relation_relevance(store, question, relations, descriptions=descriptions, similarity=sims,
                                            named=tuple(anchors)),
                         strict=True))
    scores = {r.pair: relevance[r.pair] + ANCHOR * max(anchors.get(r.source, 0.0), anchors.get(r.target, 0.0))
              for r in relations}
    touching: dict[str, list[FoundRelation]] = {}
    for r in relations:
        touching.setdefault(r.source, []).append(r)
        touching.setdefault(r.target, []).append(r)
    judged = {r.pair for r in relations if r.source in anchors or r.target in anchors}
    # each entity reached: (what is left to answer there, the anchor a relation onward from it inherits)
    reached: dict[str, tuple[str, float]] = {}
    for r in sorted((touching_r for key in anchors for touching_r in touching.get(key, ())),
                    key=lambda r: -scores[r.pair]):
        for key in (r.source, r.target):
            if key not in anchors and key not in reached:
                named = r.source if r.source in anchors else r.target
                reached[key] = (residual_text(question, r),
                                chain_anchor(r, anchors, hop_confidence(relevance[r.pair], len(touching[named]))))
    frontier = list(reached)
    while frontier:
        leaving: dict[str, str] = {}   # each relation onward from the frontier -> the entity it leaves
        for key in sorted(frontier, key=lambda k: -reached[k][1]):
            for r in touching.get(key, ()):
                if r.pair not in judged:
                    leaving.setdefault(r.pair, key)
        by_rest: dict[str, list[FoundRelation]] = {}
        found = {r.pair: r for key in frontier for r in touching.get(key, ())}
        for pair, key in leaving.items():
            by_rest.setdefault(reached[key][0], []).append(found[pair])
        hop_relevance: dict[str, float] = {}
        for rest, onward in by_rest.items():
            hop = (relation_relevance(store, _with_text(question, rest), onward, descriptions=descriptions,
                                      similarity=sims, named=tuple(anchors)) if rest.strip() else [0.0] * len(onward))
            for r, score in zip(onward, hop, strict=True):
                hop_relevance[r.pair] = score
                scores[r.pair] = score + reached[leaving[r.pair]][1]
        judged |= set(leaving)
        frontier = []
        for pair in sorted(leaving, key=lambda p: -scores[p]):   # each new entity by its best relation
            r, here = found[pair], leaving[pair]
            there = r.target if r.source == here else r.source
            if there not in anchors and there not in reached:
                rest, inherited = reached[here]
                reached[there] = (unanswered(question, said_by(r), rest),
                                  inherited * hop_confidence(hop_relevance[pair], len(touching[here])))
                frontier.append(there)
    apart = [r for r in relations if r.pair not in judged]
    anchored = [r for key in anchors for r in touching.get(key, ())]
    if apart and anchored:
        rest = residual_text(question, max(anchored, key=lambda r: scores[r.pair]))
        relevant = (relation_relevance(store, _with_text(question, rest), apart, descriptions=descriptions,
                                       similarity=sims, named=tuple(anchors)) if rest.strip() else [0.0] * len(apart))
        scores.update(zip((r.pair for r in apart), relevant, strict=True))
    return scores


def chain_anchor(reaching: FoundRelation, anchors: dict[str, float], relevance: float) -> float:
    """The anchor a next hop inherits from the named entity's relation reaching it, in the measure
    that relation answers the question (``relevance``: its ``hop_confidence``): the
    bridge's fact comes before the named entity's facts that answer nothing; a hop through an
    unasked-for relation inherits little (with e5's high cosines, about a sixth of the anchor)."""
    anchor = max(anchors.get(reaching.source, 0.0), anchors.get(reaching.target, 0.0))
    return ANCHOR * anchor * relevance


def residual_text(question: Question, answered: FoundRelation) -> str:
    """The question (and its themes) without the words a relation's keywords or description answer."""
    return unanswered(question, said_by(answered))


def said_by(relation: FoundRelation) -> frozenset[str]:
    """The stems a relation answers a question's words with: its keywords', and its description's
    less its entities' names. "M makes the 涅梅尔收割机" says nothing of 收购 (acquired), though the
    harvester's name starts with the same character: a name answers no relation word."""
    described = described_stems(relation.description, (relation.source_name, relation.target_name))
    return word_stems(" ".join(relation.keywords)) | described


def _with_text(question: Question, text: str) -> Question:
    return Question(text, question.params, question.vectors, question.turns)   # the themes are in ``text``


def rank_entities(entities: list[FoundEntity], relations: list[FoundRelation],
                  anchors: dict[str, float], described: list[str] | tuple[str, ...] = ()) -> list[FoundEntity]:
    """The named entities first; when none is named, the entities the question's words describe
    (``described``, best first: the described channel's); then those of the best relations, then
    the rest in fused order."""
    rank: dict[str, int] = {}
    for i, r in enumerate(relations):
        rank.setdefault(r.source, i)
        rank.setdefault(r.target, i)
    order = {e.key: i for i, e in enumerate(entities)}
    last = len(relations)
    first = {key: i for i, key in enumerate(described)} if not anchors else {}
    return sorted(entities, key=lambda e: (e.key not in anchors, first.get(e.key, len(first)),
                                           rank.get(e.key, last), order[e.key]))
