"""The multi-hop world in Chinese: the English world of bench/multihop_world.py translated fact by
fact, so that English and Chinese numbers compare like for like (the same seed gives the same
facts, documents laid out the same, the same questions).

Names are transliterations written without spaces, as Chinese writes foreign names: one character
per syllable of the English word (a word of two syllables gets a closing character from FILLERS,
so that every transliterated word is three characters long), a company or product suffix in
Chinese after it, a person's two words joined by "·". Because every English word is used by one
name only and every transliterated word has the same length, no name is a substring of another;
and the name characters are used nowhere else (templates, prose, questions), so a name is found
in a text exactly where the world put it (tests/test_bench_worlds.py checks both). That matters in
Chinese: with no spaces, a name inside another, or one spelt by ordinary words, would be found
where it is not.

Mixed worlds keep the documents of one language and ask in the other, names written as the
documents write them: "Kazor Systems的总部在哪里？", "Where is 喀佐尔系统 headquartered?".
"""

from __future__ import annotations

import random
import zlib

from bench.multihop_world import COMPANY_SUFFIXES, PRODUCT_SUFFIXES, QUESTIONS, SYLLABLES, Fact, Question, World

# one character per English syllable (SYLLABLES' order), chosen among those used for transliteration
SYLLABLE_CHARACTERS = dict(zip(SYLLABLES, "喀佐薇弥坦奎雷伦铎珀锡诺碧塔乌戈娅芬胡伊贾沃珂璞斯雯奥杜玛瑟", strict=True))
FILLERS = "尔姆恩兹"    # the third character of a two-syllable word
PERSON_JOIN = "·"       # between a transliterated given name and family name
COMPANY_ZH = dict(zip(COMPANY_SUFFIXES, ("系统", "动力", "控股", "实验室", "实业", "工坊", "集团", "网络"),
                      strict=True))
PRODUCT_ZH = dict(zip(PRODUCT_SUFFIXES, ("专业版", "壹号", "至尊版", "核心版", "锐界", "流光", "尊享版", "轻盈版"),
                      strict=True))

# relation kind -> (the English templates translated one for one, the extractor's keywords)
RELATIONS_ZH: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "headquartered": (("{s}的总部位于{t}。", "{s}的总办事处设在{t}。", "{s}把总部设在{t}。"), ("总部", "所在地")),
    "founded": (("{s}于{year}年创立了{t}。", "{t}由{s}创办。"), ("创始人", "创立")),
    "acquired": (("{s}于{year}年收购了{t}。", "{t}被{s}收购，交易金额未披露。", "{s}完成了对{t}的收购。"),
                 ("收购", "被收购")),
    "develops": (("{s}开发了{t}。", "{t}由{s}开发。", "{s}推出了旗下最新产品{t}。"), ("产品", "开发")),
    "partner": (("{s}与{t}签署了合作协议。", "{s}和{t}宣布成立一家合资企业。"), ("合作伙伴",)),
    "supplies": (("{s}向{t}供应零部件。", "{t}从{s}采购零件。"), ("供应商", "供应链")),
    "employs": (("{s}在{t}担任工程师。", "{s}加入{t}，出任产品经理。", "{s}在{t}领导一个研究团队。"),
                ("任职", "员工")),
    "invests": (("{s}投资了{t}。", "{s}持有{t}的少数股权。"), ("投资",)),
    "fair": (("{s}在{t}的一场贸易展览会上参展。", "{s}在{t}举办了年度客户大会。"), ("活动", "展会")),
    "spoke": (("{s}在一场行业座谈会上谈到了{t}。", "{s}撰写专栏文章，称赞了{t}。"), ("评论",)),
}
LOOSE_KEYWORDS_ZH = ("同时提及",)

PROSE_ZH = (   # bench/multihop_world.PROSE, one for one
    "分析人士指出，本季度该行业的利润率变动了百分之{n}。",
    "董事会审议了第{n}项议程，并把决定推迟到下次会议。",
    "去年有几家企业搬迁了总部，理由是租金和人才成本。",
    "业内观察人士预计，年底前将有{n}款新产品上市。",
    "随着利率连续第{n}个月上升，该地区的收购活动有所放缓。",
    "这份年度报告长达{n}页，其中有很长一章讨论可持续发展。",
    "一位发言人拒绝就进一步裁员的传闻置评。",
    "供应商抱怨付款期限长达{n}天以上。",
    "市议会批准兴建一个占地{n}公顷的新商务园区。",
    "投资者对业绩指引表示欢迎，但成交量依然清淡。",
    "初创公司的创始人往往难以招到经验丰富的工程师。",
    "制造商与软件厂商之间的合作在业内已很常见。",
    "天气原因使北部各条线路的交货延误了{n}天。",
    "员工受邀参加一场关于新办公室布局的全员大会。",
    "监管机构发布了数据留存规则草案，征求意见期为{n}周。",
)

# question shape -> (several phrasings, unspaced, with {x} for the name; the oracle's themes in Chinese)
QUESTIONS_ZH: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hq": (("{x}的总部在哪里？", "{x}的总部设在哪个城市？", "请问{x}的总部位于哪里？"), ("总部",)),
    "founder": (("{x}是谁创立的？", "谁创办了{x}？", "{x}的创始人是谁？"), ("创始人",)),
    "developer": (("哪家公司开发了{x}？", "{x}是哪家公司开发的？", "{x}出自哪家公司？"), ("产品", "开发商")),
    "acquirer": (("哪家公司收购了{x}？", "{x}被哪家公司收购了？", "是谁收购了{x}？"), ("收购",)),
    "acquirer-hq": (("收购{x}的那家公司总部在哪里？", "{x}被收购了，收购方的总部位于哪个城市？",
                     "买下{x}的公司总部设在哪里？"), ("收购", "总部")),
    "acquirer-founder": (("收购{x}的公司是谁创立的？", "{x}的收购方由谁创办？", "买下{x}的那家公司的创始人是谁？"),
                         ("收购", "创始人")),
    "developer-hq": (("开发{x}的公司总部在哪里？", "{x}的开发商总部位于哪个城市？", "推出{x}的那家公司总部设在哪里？"),
                     ("产品", "总部")),
    "products": (("{x}开发了哪些产品？", "{x}有哪些产品？", "请列出{x}开发的所有产品。"), ("产品", "开发")),
    "acquisitions": (("{x}收购了哪些公司？", "{x}都收购过哪些企业？", "请列出被{x}收购的公司。"),
                     ("收购", "被收购公司")),
    "suppliers": (("哪些公司向{x}供货？", "{x}的供应商有哪些？", "谁为{x}提供零部件？"), ("供应商", "供应链")),
    "staff": (("谁在{x}工作？", "{x}有哪些员工？", "哪些人就职于{x}？"), ("员工", "职员")),
}


def transliterate(syllables: tuple[str, ...]) -> str:
    """A word of the world as three Chinese characters."""
    word = "".join(SYLLABLE_CHARACTERS[s] for s in syllables)
    if len(syllables) == 2:
        word += FILLERS[zlib.crc32("".join(syllables).encode()) % len(FILLERS)]
    return word


def chinese_name(name: str, kind: str, syllables: dict[str, tuple[str, ...]]) -> str:
    """An English name of the world (of entity type ``kind``) as Chinese writes it."""
    words = name.split(" ")
    if kind == "Person":
        return PERSON_JOIN.join(transliterate(syllables[w]) for w in words)
    if kind == "Organization":
        return transliterate(syllables[words[0]]) + COMPANY_ZH[words[1]]
    if kind == "Product":
        return transliterate(syllables[words[0]]) + PRODUCT_ZH[words[1]]
    return transliterate(syllables[name])


def translate(world: World, documents: str, questions: str, seed: int) -> World:
    """``world`` (English) with its documents in ``documents`` and its questions in ``questions``
    ("en" or "zh"). The Chinese phrasing of each question is drawn from its own seeded generator:
    the Chinese questions over Chinese and over English documents are worded alike."""
    if documents == "zh":
        names = {name: chinese_name(name, kind, world.syllables) for name, kind in world.types.items()}
        translated = _chinese_documents(world, names)
    else:
        names = {name: name for name in world.types}
        translated = World(types=dict(world.types), facts=list(world.facts), documents=list(world.documents),
                           hubs=list(world.hubs), layouts=list(world.layouts), syllables=world.syllables)
    translated.question_language = questions
    rng = random.Random(f"zh-questions-{seed}")
    for question in world.questions:
        slot = names[question.slot]
        if questions == "zh":
            phrasings, themes = QUESTIONS_ZH[question.shape]
            text = rng.choice(phrasings).format(x=slot)
        else:
            _, english, themes = QUESTIONS[question.shape]
            text = english.format(x=slot)
        translated.questions.append(Question(question.kind, text, tuple(names[g] for g in question.gold), (slot,),
                                             themes, question.shape, slot))
    return translated


def _chinese_documents(world: World, names: dict[str, str]) -> World:
    facts = {fact: _chinese_fact(fact, names) for fact in world.facts}
    chinese = World(types={names[n]: kind for n, kind in world.types.items()},
                    facts=[facts[fact] for fact in world.facts], hubs=[names[h] for h in world.hubs], language="zh",
                    relation_keywords={kind: keywords for kind, (_, keywords) in RELATIONS_ZH.items()},
                    loose_keywords=LOOSE_KEYWORDS_ZH, syllables=world.syllables)
    for (name, _), layout in zip(world.documents, world.layouts, strict=True):
        parts = [facts[part] if isinstance(part, Fact) else part for part in layout]
        chinese.layouts.append(parts)
        chinese.documents.append((name, "".join(
            part.sentence if isinstance(part, Fact) else PROSE_ZH[part[0]].format(n=part[1]) for part in parts)))
    return chinese


def _chinese_fact(fact: Fact, names: dict[str, str]) -> Fact:
    source, target = names[fact.source], names[fact.target]
    template = RELATIONS_ZH[fact.kind][0][fact.template]
    return Fact(fact.kind, source, target, template.format(s=source, t=target, year=fact.year), fact.template,
                fact.year)
