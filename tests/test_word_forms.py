"""The forms a question's words may take in a relation's words (proxy/text/word_forms.py): lemmas
and compounds of adjacent words, on the question's side only."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from proxy.retrieval.params import QueryParams
from proxy.retrieval.relevance import edge_relevance, unanswered
from proxy.retrieval.select import relation_match, word_stems
from proxy.retrieval.stages import Question
from proxy.store.changes import pair_key
from proxy.text.word_forms import asked_stems, cut_names, relation_words, word_senses
from proxy.text.words import split_words


def senses(text: str) -> dict[str, frozenset[str]]:
    return dict(word_senses(text))


def test_an_irregular_phrasal_verb_meets_the_noun_written_as_one_word() -> None:
    asked = asked_stems("Which company took over the maker?")
    assert word_stems("takeover") <= asked and word_stems("take") <= asked
    # a relation whose keywords say "takeover" answers the words "took over" (and only they) of the question
    assert relation_match(asked, ["acquisition", "takeover"], "", ("A", "B")) > 0
    assert relation_match(word_stems("Which company took over the maker?"), ["acquisition", "takeover"], "",
                          ("A", "B")) == 0   # what stems alone gave


def test_inflected_forms_meet_their_dictionary_form() -> None:
    assert word_stems("lead") <= asked_stems("Who led the firm?")
    assert word_stems("begin") <= asked_stems("When began the strike?")
    assert word_stems("sell") <= asked_stems("Who sold the plant?")


def test_a_compound_takes_a_short_first_word_only_and_never_a_stopword() -> None:
    found = senses("Who is the board chair of the head office?")
    assert found["chair"] == word_stems("chair")   # "boardchair" would be "board": chair is not answered by "board"
    assert word_stems("headoffice") <= found["head"] and word_stems("headoffice") <= found["office?"]
    assert found["the"] == frozenset()   # "the board" is no compound


def test_the_residual_drops_both_words_a_compound_answers() -> None:

    question = Question("Who chairs the company that took over the maker?", QueryParams(), {"query": np.zeros(4)})
    rest = unanswered(question, word_stems("acquisition takeover"))
    assert "took" not in rest.split() and "over" not in rest.split() and "chairs" in rest.split()


def test_unspaced_scripts_keep_their_stems() -> None:
    text = "收购诺瓦工坊的那家公司总部在哪里？"
    assert asked_stems(text) == word_stems(text)


def test_names_and_unknown_words_stay_as_they_are() -> None:
    assert asked_stems("Kravon Dynamics") >= word_stems("Kravon Dynamics")
    assert word_stems("Halgolvar") <= asked_stems("Who makes the Halgolvar?")



def test_the_names_a_question_writes_are_cut_where_written_not_their_words_everywhere() -> None:
    # 合作社 (a cooperative) is in the hub's name and in its partner's; 合作 (to work with) is asked
    asked = relation_words("哪些公司与卡卡兹合作社合作？", ["卡卡兹合作社", "詹温戈合作社"])
    assert relation_match(asked, ["合作", "合作伙伴"], "", ("卡卡兹合作社", "詹温戈合作社")) == 1.0
    assert not asked & word_stems("卡卡兹")
    english = relation_words("Which firms cooperate with Zandor Cooperative?", ["Zandor Cooperative", "Acme Works"])
    assert "coope" in english and "zando" not in english


def test_the_names_the_question_writes_are_no_relation_words_on_any_hop() -> None:
    """The acquirer's edges are judged by what the acquisition left ("chairs"); the named company's
    name is still in those words, and its "Cooperative" would meet a partnership's "cooperation"."""
    question = Question("Who chairs the company that acquired Zanvingol Cooperative?", QueryParams(), {})
    chair, partner = pair_key("zanwicjen cooperative", "yelcas"), pair_key("zanwicjen cooperative", "dorbel works")
    facts: dict[str, tuple[tuple[str, ...], str, str, int]] = {
        chair: (("chair", "board"), "Zanwicjen Cooperative", "Yelcas", 1),
        partner: (("partner", "cooperation"), "Zanwicjen Cooperative", "Dorbel Works", 2)}
    rest = "Who chairs the company that Zanvingol Cooperative?"
    store = cast(Any, None)   # with the cosines given, no index is read
    named = edge_relevance(store, question, facts, asked=rest, similarity={}, named=("zanvingol cooperative",))
    assert named[partner] == 0.0 and named[chair] > 0.0
    assert edge_relevance(store, question, facts, asked=rest, similarity={})[partner] > 0.0   # what it was


def test_a_name_is_cut_from_a_chains_remaining_words_in_chinese_too() -> None:
    rest = " ".join(split_words("收购了伊韦韦糖浆制造商的公司总部在哪里？"))   # as unanswered() leaves them
    assert "韦" in rest and " " in rest
    assert not set("伊韦糖浆") & set(cut_names(rest, ("伊韦韦糖浆",)))
