"""Words that say nothing about a text's subject, per language, from bm25s' maintained lists
(English: Lucene's; Chinese: the common Chinese list), folded like the text they are compared with."""

from __future__ import annotations

import functools

from bm25s.stopwords import STOPWORDS_CHINESE, STOPWORDS_EN

from proxy.text.fold import fold

# question words an English question is made of besides its subject: "Which companies does X own?"
# (Lucene's list has the articles and prepositions, not these)
_ENGLISH_QUESTIONS = ("which", "where", "what", "when", "who", "whom", "whose", "why", "how", "does", "did",
                      "do", "that", "this", "with", "from", "have", "has", "there", "their", "them", "were",
                      "about", "into", "also", "been")


@functools.cache
def stopwords() -> frozenset[str]:
    return frozenset(fold(word) for word in (*STOPWORDS_EN, *_ENGLISH_QUESTIONS, *STOPWORDS_CHINESE))


@functools.cache
def keyword_stopwords() -> frozenset[str]:
    """The keyword index's list: Lucene's English one (as bm25s had it) and the Chinese one."""
    return frozenset(fold(word) for word in (*STOPWORDS_EN, *STOPWORDS_CHINESE))
