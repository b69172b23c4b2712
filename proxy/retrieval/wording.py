"""The words GraphGate puts around a context, in the language of the turn: the instructions, the
line before the user's own instructions, the section headings and what a ``/context`` turn is
told when nothing was found. One entry per language; a language without one is worded in English.

Which language a turn is worded in: the ``language`` setting (a knowledge base's override, or
``GRAPHGATE_LANGUAGE``) when it names one, else the question's own (``language_setting.language_for``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wording:
    language: str                 # the name the setting and ``proxy.text.language.detect`` use
    aliases: tuple[str, ...]      # other names the setting may give it (any case)
    instructions: str
    user_instructions: str        # the line before the user's own instructions (``/[...]`` prefix)
    entities: str                 # the section headings
    relations: str                # (the ``sections`` layout)
    facts: str                    # (the ``evidence`` layout: the relations as facts)
    communities: str
    passages: str
    references: str
    nothing_found: str            # a ``/context`` turn's reply when nothing relevant was found


ENGLISH = Wording(
    "English", ("en", "eng"),
    instructions="""You answer questions using the knowledge base context below: facts from a knowledge \
graph (entities and their relations) and passages from the user's documents.
- Base the answer on this context. If the context does not contain the answer, say so plainly \
instead of guessing; you may then add what you know in general, clearly marked as not from the documents.
- Answer in the language of the user's question.
- Cite the passages you use as [n], with n from the reference list, and end with a short "References" \
list of the documents you cited.""",
    user_instructions="Additional instructions from the user:",
    entities="## Entities (knowledge graph)",
    relations="## Relations (knowledge graph)",
    facts="## Facts (knowledge graph relations)",
    communities="## Communities (summaries of related entities)",
    passages="## Document passages",
    references="## References",
    nothing_found="(The knowledge base has nothing relevant to this question.)",
)

CHINESE = Wording(
    "Chinese", ("zh", "zho", "chi", "中文", "汉语", "漢語", "简体中文", "繁體中文"),
    instructions="""你根据下面的知识库上下文回答问题：上下文包括知识图谱中的事实（实体及其关系）和用户文档中的段落。
- 以这些上下文为回答的依据。如果上下文中没有答案，请直接说明，不要猜测；之后你可以补充你所了解的一般知识，\
并明确标注这些内容并非来自文档。
- 用用户提问所用的语言回答。
- 用 [n] 引用你所使用的段落，n 取自参考文献列表中的编号；回答最后附上一个简短的“参考文献”列表，列出你引用的文档。""",
    user_instructions="用户的附加说明：",
    entities="## 实体（知识图谱）",
    relations="## 关系（知识图谱）",
    facts="## 事实（知识图谱中的关系）",
    communities="## 社区（相关实体的摘要）",
    passages="## 文档段落",
    references="## 参考文献",
    nothing_found="（知识库中没有与这个问题相关的内容。）",
)

WORDINGS: dict[str, Wording] = {wording.language: wording for wording in (ENGLISH, CHINESE)}
_BY_NAME: dict[str, Wording] = {name.casefold(): wording for wording in WORDINGS.values()
                                for name in (wording.language, *wording.aliases)}


def wording_for(language: str) -> Wording:
    """The wording of ``language`` (any case, or one of its aliases); English for a language
    without an entry."""
    return _BY_NAME.get(language.strip().casefold(), ENGLISH)
