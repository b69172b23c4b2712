"""The synthetic world of the multi-hop recall bench: invented companies, people, products and
cities, the facts that tie them, documents that state those facts among distractor prose, and
questions of three kinds whose gold answers the facts give.

- hub companies carry dozens of relations of several kinds (products, staff, partners, suppliers,
  investments, acquisitions, trade fairs), spread over many documents;
- 1-hop questions ask one fact ("Where is X headquartered?");
- 2-hop questions go through a bridge entity stated in another document ("Where is the company
  that acquired X headquartered?": the acquisition in a news item, the acquirer's city in its
  profile); their gold answers are the bridge and the answer, so a context holding only a city
  that happens to match does not count;
- list questions ask all the targets of one relation of a hub ("Which products does Y develop?").

Every name is made of words no other name uses, so that a name found in a context is that
entity and no other. Nothing here imports GraphGate: the world is plain data.

``build_world(..., language=...)`` gives the same world in other languages (bench/multihop_zh.py):
``zh`` its exact Chinese translation, ``zh-on-en`` Chinese questions over the English documents,
``en-on-zh`` English questions over the Chinese documents. The builder keeps what a translation
needs (each fact's template and year, each document's layout, each question's shape and slots)
without drawing one more random number, so the English world is what it always was.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SYLLABLES = ("ka", "zor", "vel", "mir", "tan", "quo", "rex", "lun", "dra", "pel", "sif", "nox", "bri", "tal", "um",
             "gor", "yas", "fen", "hul", "isk", "jav", "wob", "cre", "plo", "stu", "ven", "oth", "dul", "mak", "ser")
COMPANY_SUFFIXES = ("Systems", "Dynamics", "Holdings", "Labs", "Industries", "Works", "Group", "Networks")
PRODUCT_SUFFIXES = ("Pro", "One", "Max", "Core", "Edge", "Flow", "Prime", "Lite")

LANGUAGES = ("en", "zh", "zh-on-en", "en-on-zh")   # "questions-on-documents" when they differ

# relation kind -> (sentence templates with {s} source and {t} target, the keywords an extractor gives it)
RELATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "headquartered": (("{s} is headquartered in {t}.", "The head office of {s} is in {t}.",
                       "{s} has its headquarters in {t}."), ("headquarters", "location")),
    "founded": (("{s} founded {t} in {year}.", "{t} was founded by {s}."), ("founder", "founded")),
    "acquired": (("{s} acquired {t} in {year}.", "{t} was acquired by {s} for an undisclosed sum.",
                  "{s} completed its takeover of {t}."), ("acquisition", "acquired")),
    "develops": (("{s} develops {t}.", "{t} is developed by {s}.", "{s} launched {t}, its newest product."),
                 ("product", "develops")),
    "partner": (("{s} signed a partnership with {t}.", "{s} and {t} announced a joint venture."),
                ("partnership",)),
    "supplies": (("{s} supplies components to {t}.", "{t} buys parts from {s}."), ("supplier", "supply chain")),
    "employs": (("{s} works at {t} as an engineer.", "{s} joined {t} as a product manager.",
                 "{s} leads a research team at {t}."), ("employment", "staff")),
    "invests": (("{s} invested in {t}.", "{s} holds a minority stake in {t}."), ("investment",)),
    "fair": (("{s} exhibited at a trade fair in {t}.", "{s} held its annual customer conference in {t}."),
             ("event", "trade fair")),
    "spoke": (("{s} spoke about {t} at an industry panel.", "{s} wrote a column praising {t}."),
              ("commentary",)),
}
LOOSE_KEYWORDS = ("mentioned together",)   # two names in a sentence that states no fact of the world

# question shape -> (its kind, the English question with {x} for its one slot, the oracle's themes)
QUESTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "hq": ("1-hop", "Where is {x} headquartered?", ("headquarters",)),
    "founder": ("1-hop", "Who founded {x}?", ("founder",)),
    "developer": ("1-hop", "Which company develops {x}?", ("product", "developer")),
    "acquirer": ("1-hop", "Which company acquired {x}?", ("acquisition",)),
    "acquirer-hq": ("2-hop", "Where is the company that acquired {x} headquartered?", ("acquisition", "headquarters")),
    "acquirer-founder": ("2-hop", "Who founded the company that acquired {x}?", ("acquisition", "founder")),
    "developer-hq": ("2-hop", "Where is the company that develops {x} headquartered?", ("product", "headquarters")),
    "products": ("list", "Which products does {x} develop?", ("products", "develops")),
    "acquisitions": ("list", "Which companies has {x} acquired?", ("acquisitions", "acquired companies")),
    "suppliers": ("list", "Which companies supply {x}?", ("suppliers", "supply chain")),
    "staff": ("list", "Who works at {x}?", ("employees", "staff")),
}

PROSE = (
    "Analysts noted that margins in the sector moved by {n} percent during the quarter.",
    "The board reviewed agenda item {n} and postponed a decision until the next meeting.",
    "Several firms moved their headquarters last year, citing rents and the cost of talent.",
    "Industry observers expect {n} new products to reach the market before the end of the year.",
    "Acquisitions in the region slowed as interest rates rose for the {n}th consecutive month.",
    "The annual report runs to {n} pages and includes a long section on sustainability.",
    "A spokesperson declined to comment on rumours about further job cuts.",
    "Suppliers complained about payment terms that stretched beyond {n} days.",
    "The city council approved a new business park covering {n} hectares.",
    "Investors welcomed the guidance, although trading volumes stayed thin.",
    "Founders of young companies often struggle to hire experienced engineers.",
    "Partnerships between manufacturers and software vendors have become common in the industry.",
    "The weather delayed deliveries for {n} days across the northern routes.",
    "Employees were invited to a town hall meeting about the new office layout.",
    "Regulators published draft rules on data retention with a consultation of {n} weeks.",
)


@dataclass(frozen=True)
class Fact:
    kind: str        # a key of RELATIONS
    source: str
    target: str
    sentence: str
    template: int = 0   # which of the kind's templates the sentence is (a translation uses the same one)
    year: int = 0       # the year a template may name


@dataclass(frozen=True)
class Question:
    kind: str                  # "1-hop", "2-hop" or "list"
    text: str
    gold: tuple[str, ...]      # every name the context must hold
    low: tuple[str, ...]       # oracle keywords: the names the question gives
    high: tuple[str, ...]      # oracle keywords: its themes
    shape: str = ""            # a key of QUESTIONS: what a translation asks
    slot: str = ""             # the name the question gives, in English


@dataclass
class World:
    types: dict[str, str] = field(default_factory=dict)               # name -> entity type
    facts: list[Fact] = field(default_factory=list)
    documents: list[tuple[str, str]] = field(default_factory=list)    # (name, text)
    questions: list[Question] = field(default_factory=list)
    hubs: list[str] = field(default_factory=list)
    language: str = "en"            # the documents' language (the extractor writes in it)
    question_language: str = "en"
    relation_keywords: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: {kind: keywords for kind, (_, keywords) in RELATIONS.items()})
    loose_keywords: tuple[str, ...] = LOOSE_KEYWORDS
    # what a translation needs: each document's layout (facts, and prose as (template, number)) in order,
    # and each name's words as syllables
    layouts: list[list[Fact | tuple[int, int]]] = field(default_factory=list)
    syllables: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def by_sentence(self) -> dict[str, Fact]:
        return {fact.sentence: fact for fact in self.facts}

    def targets(self, kind: str, source: str) -> list[str]:
        return [f.target for f in self.facts if f.kind == kind and f.source == source]

    def sources(self, kind: str, target: str) -> list[str]:
        return [f.source for f in self.facts if f.kind == kind and f.target == target]


def unique_word(rng: random.Random, used: set[str], syllables: dict[str, tuple[str, ...]],
                alphabet: tuple[str, ...] = SYLLABLES, lengths: tuple[int, ...] = (2, 3, 3)) -> str:
    """A word of ``alphabet``'s syllables not in ``used`` (then added to it; its syllables kept in
    ``syllables``, for a transliteration)."""
    while True:
        parts = tuple(rng.choice(alphabet) for _ in range(rng.choice(lengths)))
        word = "".join(parts).capitalize()
        if word not in used:
            used.add(word)
            syllables[word] = parts
            return word


class _Names:
    """Names built from words used once in the whole world."""

    def __init__(self, rng: random.Random, syllables: dict[str, tuple[str, ...]]) -> None:
        self.rng, self.used, self.syllables = rng, set[str](), syllables

    def word(self) -> str:
        return unique_word(self.rng, self.used, self.syllables)

    def company(self) -> str:
        return f"{self.word()} {self.rng.choice(COMPANY_SUFFIXES)}"

    def product(self) -> str:
        return f"{self.word()} {self.rng.choice(PRODUCT_SUFFIXES)}"

    def person(self) -> str:
        return f"{self.word()} {self.word()}"


class _Builder:
    def __init__(self, doc_count: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.world = World()
        self.names = _Names(self.rng, self.world.syllables)
        self.doc_count = doc_count

    def entity(self, name: str, kind: str) -> str:
        self.world.types[name] = kind
        return name

    def fact(self, kind: str, source: str, target: str) -> Fact:
        templates = RELATIONS[kind][0]
        template = self.rng.choice(templates)
        year = self.rng.randint(1975, 2024)
        fact = Fact(kind, source, target, template.format(s=source, t=target, year=year), templates.index(template),
                    year)
        self.world.facts.append(fact)
        return fact

    def document(self, prefix: str, facts: list[Fact]) -> None:
        layout: list[Fact | tuple[int, int]] = []
        for _ in range(self.rng.randint(14, 26)):
            template = self.rng.randrange(len(PROSE))   # what rng.choice(PROSE) draws
            layout.append((template, self.rng.randint(2, 99)))
        for fact in facts:
            layout.insert(self.rng.randint(0, len(layout)), fact)
        self.world.layouts.append(layout)
        self.world.documents.append((f"{prefix}-{len(self.world.documents):04d}.txt", " ".join(
            part.sentence if isinstance(part, Fact) else PROSE[part[0]].format(n=part[1]) for part in layout)))

    def build(self) -> World:
        rng, names = self.rng, self.names
        n_hubs, n_companies = max(4, self.doc_count // 40), max(40, self.doc_count // 2)
        cities = [self.entity(names.word(), "Location") for _ in range(max(20, self.doc_count // 4))]
        hubs = [self.entity(names.company(), "Organization") for _ in range(n_hubs)]
        regular = [self.entity(names.company(), "Organization") for _ in range(n_companies)]
        self.world.hubs = hubs
        unacquired = regular[:]
        rng.shuffle(unacquired)

        def people(count: int) -> list[str]:
            return [self.entity(names.person(), "Person") for _ in range(count)]

        def products(count: int) -> list[str]:
            return [self.entity(names.product(), "Product") for _ in range(count)]

        for company in regular:  # a profile each: where, who founded it, what it makes, a few neighbours
            facts = [self.fact("headquartered", company, rng.choice(cities)),
                     self.fact("founded", people(1)[0], company),
                     *(self.fact("develops", company, p) for p in products(rng.randint(1, 3))),
                     self.fact("partner", company, rng.choice([c for c in regular if c != company])),
                     self.fact("fair", company, rng.choice(cities)),
                     *(self.fact("employs", p, company) for p in people(rng.randint(2, 4)))]
            rng.shuffle(facts)
            self.document("profile", facts)
        for company in regular[: n_companies // 4]:  # deals between ordinary companies: news of their own
            target = unacquired.pop()
            if target != company:
                self.document("deal", [self.fact("acquired", company, target)])
        for hub in hubs:  # a short profile, then dozens of relations spread over news items
            self.document("hub", [self.fact("headquartered", hub, rng.choice(cities)),
                                  self.fact("founded", people(1)[0], hub)])
            others = [c for c in regular if c in unacquired]
            news = [*(self.fact("develops", hub, p) for p in products(rng.randint(10, 16))),
                    *(self.fact("employs", p, hub) for p in people(rng.randint(8, 14))),
                    *(self.fact("partner", hub, c) for c in rng.sample(regular, rng.randint(8, 12))),
                    *(self.fact("supplies", c, hub) for c in rng.sample(regular, rng.randint(6, 10))),
                    *(self.fact("invests", hub, c) for c in rng.sample(regular, rng.randint(4, 8))),
                    *(self.fact("fair", hub, c) for c in rng.sample(cities, rng.randint(3, 5)))]
            for target in rng.sample(others, min(len(others), rng.randint(4, 7))):
                unacquired.remove(target)
                news.append(self.fact("acquired", hub, target))
            rng.shuffle(news)
            while news:
                self.document("news", [news.pop() for _ in range(min(len(news), rng.randint(3, 5)))])
        while len(self.world.documents) < self.doc_count:  # commentary: names beside names, nothing asked
            self.document("column", [self.fact("spoke", people(1)[0], rng.choice(hubs + regular))
                                     for _ in range(rng.randint(1, 3))])
        self.questions()
        return self.world

    def questions(self) -> None:
        """As many questions of each kind as a tenth of the documents (lists: at most four per hub)."""
        world, rng = self.world, self.rng
        acquired = [f for f in world.facts if f.kind == "acquired"]
        made = [f for f in world.facts if f.kind == "develops"]
        companies = [n for n, t in world.types.items() if t == "Organization"]

        def city(company: str) -> str:
            return world.targets("headquartered", company)[0]

        def founder(company: str) -> str:
            return world.sources("founded", company)[0]

        def ask(shape: str, slot: str, gold: tuple[str, ...]) -> Question:
            kind, text, themes = QUESTIONS[shape]
            return Question(kind, text.format(x=slot), gold, (slot,), themes, shape, slot)

        def one_hop(i: int) -> Question:
            company, deal, product = rng.choice(companies), rng.choice(acquired), rng.choice(made)
            return [
                ask("hq", company, (city(company),)),
                ask("founder", company, (founder(company),)),
                ask("developer", product.target, (product.source,)),
                ask("acquirer", deal.target, (deal.source,)),
            ][i % 4]

        def two_hop(i: int) -> Question:
            deal, product = rng.choice(acquired), rng.choice(made)
            return [
                ask("acquirer-hq", deal.target, (deal.source, city(deal.source))),
                ask("acquirer-founder", deal.target, (deal.source, founder(deal.source))),
                ask("developer-hq", product.target, (product.source, city(product.source))),
            ][i % 3]

        def lists(hub: str) -> list[Question]:
            return [
                ask("products", hub, tuple(world.targets("develops", hub))),
                ask("acquisitions", hub, tuple(world.targets("acquired", hub))),
                ask("suppliers", hub, tuple(world.sources("supplies", hub))),
                ask("staff", hub, tuple(world.sources("employs", hub))),
            ]

        count = max(1, len(world.documents) // 10)
        world.questions.extend(one_hop(i) for i in range(count))
        world.questions.extend(two_hop(i) for i in range(count))
        by_kind = list(zip(*(lists(hub) for hub in world.hubs), strict=True))  # products of every hub first
        world.questions.extend([q for kind in by_kind for q in kind][:count])


def build_world(doc_count: int, seed: int = 18, language: str = "en") -> World:
    """The world of ``doc_count`` documents or a few more (every hub's news items are kept whole),
    in one of LANGUAGES: the same facts and questions, translated (bench/multihop_zh.py)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, not {language!r}")
    world = _Builder(doc_count, seed).build()
    if language == "en":
        return world
    from bench.multihop_zh import translate  # it builds on this module's types

    questions, _, documents = language.partition("-on-")
    return translate(world, documents or questions, questions, seed)
