"""The synthetic world of the many-shapes recall bench (issue 32): industrial firms of a dozen sectors,
their people, products, plants and deals, stated by documents among trade-press prose, and questions
of many shapes whose gold names the world gives.

It is not bench/multihop_world.py's world reworded: other names (other syllables), another domain
(sectors, products of each sector's kind), other sentence templates (several per statement, some
stating a company's attributes in passing: "Founded by X in 1903, Y has grown into a mid-sized
maritime firm."), attributes of their own (founding year, headcount, revenue, sector) and documents
dated in the text (a value stated in 2017 may change in 2024). What it shares is the machinery: a
name is made of words no other name uses, so a name found in a context is that entity and no
other; the questions are bench/multihop_world.Question (plus the turns before one and a stale value),
so that bench/multihop_recall.py's query and scoring helpers ask them.

The shapes (``Question.kind``; ``Question.shape`` is the question's template key) and their gold:

- ``1-hop``, ``2-hop``, ``list``: retrieval v2's shapes as a control (the bridge and the answer for
  2-hop; every target of a hub's relation of one kind for a list);
- ``comparison``: "Which was founded first, X or Y?": both companies and both values as the text
  writes them ("1903", "4,270", "412.5");
- ``3-hop``: "Who chairs the firm that acquired the maker of the P?": every intermediate entity
  and the answer;
- ``alias by full name`` / ``alias by alias``: a company introduced once as "Kravon Brothers (KVB)"
  or "KVB, short for Kravon Brothers", called only "KVB" in some documents and only by its full name
  in others; the question names it one way and asks a fact stated only under the other name;
- ``paraphrase``: hub companies (50+ relations of 10+ kinds) asked with words the documents never
  use for the relation (based / headquartered, runs / chief executive, bought / acquired, ...:
  PARAPHRASE_WORDS, which no document holds at all);
- ``follow-up``: an earlier user turn names the company, the question says "its" / "they";
- ``attribute list``: founding year, headcount and revenue, stated in different documents;
- ``updated``: a headcount or revenue stated in a 2016-2019 document and again, changed, in a
  2023-2024 one: gold is the new value; ``Question.stale`` is the old one (reported apart);
- ``negative``: "Does X make the P?" when another firm of its sector does: gold is X's products;
- ``count``: "How many products does Y make?": all of them;
- ``temporal``: "Who led X before Z?": the predecessor (or the successor, asked the other way);
- ``no entity``: "Which maritime firms employ more than 5,000 people?": the firms.

Every year before 1980 in the text is a founding year (one company each); headcounts and revenues
are unique too: a gold value found in a context is that company's.

All wording is in one table per language (``Wording``: statements, prose, questions, keywords);
statements and questions keep their template index and slots, so a translation can render the same
world in another language. Two exist: English (``EN``, here) and Chinese (``ZH``, bench/shapes_zh.py,
with as many templates per key, so one seed draws the same facts in both; names, numbers and dates
written the Chinese way). Nothing here imports GraphGate: the world is plain data.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.multihop_world import Question, unique_word

SYLLABLES = ("bel", "dor", "ash", "vin", "kor", "mel", "tis", "ran", "gol", "esh", "var", "nim", "pru", "sol",
             "tev", "hal", "orn", "yel", "cas", "lom", "bre", "fas", "gid", "ilm", "jen", "kup", "ned", "osk",
             "raf", "suv", "zan", "wic")
COMPANY_SUFFIXES = ("Brothers", "Consolidated", "Associates", "Partners", "Enterprises", "Concern", "Trading",
                    "Cooperative")
# sector -> the kinds of product its firms make (a product is "<word> <kind>"); the last two make none
SECTORS: dict[str, tuple[str, ...]] = {
    "maritime": ("Skiff", "Trawler", "Tug", "Barge"),
    "agricultural": ("Harvester", "Seeder", "Baler", "Plough"),
    "textile": ("Loom", "Spinner", "Knitter"),
    "mining": ("Drill", "Crusher", "Hoist"),
    "aviation": ("Glider", "Turboprop", "Rotor"),
    "pharmaceutical": ("Tablet", "Serum", "Syrup"),
    "railway": ("Railcar", "Locomotive", "Bogie"),
    "food": ("Oven", "Mixer", "Slicer"),
    "energy": ("Turbine", "Boiler", "Heat Pump"),
    "printing": ("Press", "Binder", "Folder"),
    "banking": (),
    "accounting": (),
}
MAKERS = tuple(s for s, kinds in SECTORS.items() if kinds)
LANGUAGES = ("en", "zh")
FOUNDED_BEFORE = 1980   # founding years are all earlier, every other year (deals, tenures, dates) later

SHAPES = ("1-hop", "2-hop", "list", "comparison", "3-hop", "alias by full name", "alias by alias", "paraphrase",
          "follow-up", "attribute list", "updated", "negative", "count", "temporal", "no entity")

# statement kind -> (the relations it states as (relation kind, source slot, target slot), the slots whose
# entity it describes (an attribute stated in passing), the slots that only name another slot's entity)
STATEMENTS: dict[str, tuple[tuple[tuple[str, str, str], ...], tuple[str, ...], tuple[str, ...]]] = {
    "dateline": ((), (), ()),
    "sector": ((), ("c",), ()),
    "founder": ((("founder", "p", "c"),), ("c",), ()),
    "founder-sector": ((("founder", "p", "c"),), ("c",), ()),
    "hq": ((("hq", "c", "city"),), (), ()),
    "chair": ((("chair", "p", "c"),), (), ()),
    "makes": ((("makes", "c", "prod"),), (), ()),
    "fair-makes": ((("makes", "c", "prod"), ("fair", "c", "city")), (), ()),
    "fair": ((("fair", "c", "city"),), (), ()),
    "plant": ((("plant", "c", "city"),), (), ()),
    "employs": ((("employs", "p", "c"),), (), ()),
    "partner": ((("partner", "c", "o"),), (), ()),
    "supplies": ((("supplies", "c", "o"),), (), ()),
    "lender": ((("lender", "c", "o"),), (), ()),
    "auditor": ((("auditor", "c", "o"),), (), ()),
    "acquired": ((("acquired", "a", "t"),), (), ()),
    "ceo": ((("ceo", "p", "c"),), (), ()),
    "ceo-past": ((("former-ceo", "p", "c"),), (), ()),
    "succession": ((("ceo", "new", "c"), ("former-ceo", "old", "c"), ("succeeded", "new", "old")), (), ()),
    "headcount": ((), ("c",), ()),
    "revenue": ((), ("c",), ()),
    "headcount-revenue": ((), ("c",), ()),
    "headcount-now": ((), ("c",), ()),
    "revenue-now": ((), ("c",), ()),
    "alias-plant": ((("plant", "f", "city"),), ("f",), ("k",)),
    "alias-partner": ((("partner", "f", "o"),), ("f",), ("k",)),
    "column": ((("column", "p", "c"),), (), ()),
}
QUESTION_NAMES = ("x", "y", "p", "z", "w")   # the question slots that hold names


@dataclass(frozen=True)
class Wording:
    """Everything a language writes: statement templates (per STATEMENTS kind), distractor prose,
    questions (per question key: shape, phrasings, the oracle's themes), the turns before a follow-up,
    the extractor's keywords per relation kind, sector names, and how numbers and dates are written."""
    statements: dict[str, tuple[str, ...]]
    prose: tuple[str, ...]
    questions: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]
    history: tuple[tuple[str, ...], tuple[str, ...]]      # (user turns, assistant turns) before a follow-up
    relation_keywords: dict[str, tuple[str, ...]]
    loose_keywords: tuple[str, ...]
    sectors: dict[str, str]
    months: tuple[str, ...]
    paraphrase_words: tuple[str, ...]   # the paraphrase questions' relation words: no document may use them
    language: str = "en"
    joiner: str = " "                   # between a document's sentences

    def number(self, value: int) -> str:
        return f"{value:,}"

    def money(self, millions: str) -> str:
        """A revenue (millions of euros, "412.5") as the templates' {r} writes it."""
        return millions

    def name(self, english: str, kind: str, syllables: dict[str, tuple[str, ...]]) -> str:
        """A name of the world (made in English: "Kravon Brothers") as this language writes it."""
        return english

    def short_forms(self, name: str, english: str, acronym: str) -> list[str]:
        """The short forms a text may introduce for the company ``name``, the likeliest first."""
        return [acronym]

    def date(self, iso: str) -> str:
        year, month, day = (int(part) for part in iso.split("-"))
        return f"{day} {self.months[month - 1]} {year}"

    def render(self, template: str, slots: dict[str, str]) -> str:
        values = dict(slots)
        if "n" in values:
            values["n"] = self.number(int(values["n"]))
        if "date" in values:
            values["date"] = self.date(values["date"])
        if "sector" in values:
            values["sector"] = self.sectors[values["sector"]]
        if "r" in values:
            values["r"] = self.money(values["r"])
        return template.format(**values)


EN = Wording(
    statements={
        "dateline": ("Bulletin of {date}.", "Dated {date}.", "Published on {date}.", "Trade notes, {date}."),
        "sector": ("{c} is active in the {sector} sector.", "{c} is one of the region's {sector} companies.",
                   "As a {sector} business, {c} depends on steady orders."),
        "founder": ("{c} was founded by {p} in {year}.", "{p} established {c} in {year}.",
                    "{c} traces its origins to {year}, when {p} opened its first workshop."),
        "founder-sector": ("{c}, a {sector} firm founded by {p} in {year}, celebrated a strong season.",
                           "Founded by {p} in {year}, {c} has grown into a mid-sized {sector} firm."),
        "hq": ("{c} is headquartered in {city}.", "The head office of {c} stands in {city}.",
               "{c} keeps its head office in {city}, close to the old town.",
               "From its headquarters in {city}, {c} serves customers across the country."),
        "chair": ("{p} chairs the board of {c}.", "The board of {c} is chaired by {p}.",
                  "{p}, who chairs {c}, opened the annual meeting."),
        "makes": ("{c} manufactures the {prod}.", "The {prod} comes from the workshops of {c}.",
                  "{c} added the {prod} to its catalogue.", "Customers praised the {prod}, a product of {c}."),
        "fair-makes": ("{c} showed the {prod} at the trade fair in {city}.",
                       "At the trade fair in {city}, {c} presented the {prod}."),
        "fair": ("{c} exhibited at the trade fair in {city}.", "{c} took a large stand at the exhibition in {city}."),
        "plant": ("{c} operates a plant in {city}.", "{c} opened a factory in {city}.",
                  "A new factory of {c} in {city} began production."),
        "employs": ("{p} works as an engineer at {c}.", "{p} joined {c} as a buyer.",
                    "{p} manages the warehouse of {c}."),
        "partner": ("{c} and {o} signed a cooperation agreement.", "{c} teamed up with {o} on a joint project."),
        "supplies": ("{c} delivers components to {o}.", "{o} sources parts from {c}.",
                     "{c} is a long-standing supplier of {o}."),
        "lender": ("{c} extends a credit line to {o}.", "{o} keeps its main accounts at {c}.",
                   "{c} is the principal lender of {o}."),
        "auditor": ("{c} audits the annual statements of {o}.", "{o} appointed {c} as its auditor."),
        "acquired": ("{a} acquired {t} in {year}.", "{a} completed its takeover of {t}.",
                     "{t} became part of {a} in {year}.", "Shareholders of {t} approved the takeover by {a}."),
        "ceo": ("{p} is the chief executive of {c}.", "{c} is led by chief executive {p}.",
                "{p} has been chief executive of {c} since {year}."),
        "ceo-past": ("{p} served as chief executive of {c} from {y1} to {y2}.",
                     "{p} led {c} as chief executive between {y1} and {y2}."),
        "succession": ("{new} succeeded {old} as chief executive of {c} in {year}.",
                       "In {year}, {new} took over from {old} as chief executive of {c}."),
        "headcount": ("{c} employs {n} people.",
                      "With a workforce of {n}, {c} ranks among the larger employers of its district.",
                      "{c} reported a headcount of {n} at the end of the year."),
        "revenue": ("{c} reported annual revenue of {r} million euros.", "Sales at {c} reached {r} million euros.",
                    "{c} closed the year with revenue of {r} million euros."),
        "headcount-revenue": ("{c} employs {n} people and turned over {r} million euros.",
                              "With {n} staff, {c} generated revenue of {r} million euros."),
        "headcount-now": ("{c} now employs {n} people.", "According to its latest filing, {c} has a workforce of {n}."),
        "revenue-now": ("{c} now reports annual revenue of {r} million euros.",
                        "Revenue at {c} now stands at {r} million euros."),
        "alias-plant": ("{f} ({k}) opened a plant in {city}.", "{k}, short for {f}, opened a plant in {city}."),
        "alias-partner": ("{f} ({k}) signed a cooperation agreement with {o}.",
                          "{k}, short for {f}, teamed up with {o} on a joint project."),
        "column": ("{p} praised {c} in a newspaper column.", "{p} wrote that {c} deserves more attention.",
                   "In an interview, {p} mentioned {c} as an example for the region."),
    },
    prose=(
        "Freight rates on the coastal routes rose by {n} percent over the summer.",
        "The chamber of commerce counted {n} new members this spring.",
        "Energy prices weighed on margins across heavy industry.",
        "Several workshops reported shortages of skilled welders.",
        "Trade unions and employers met {n} times before agreeing on a wage deal.",
        "Customs delays at the border added {n} days to delivery times.",
        "Exporters welcomed the weaker currency, although import costs climbed.",
        "The ministry extended its subsidy programme for apprenticeships by {n} months.",
        "Insurance premiums for warehouses have doubled in some districts.",
        "Analysts at the regional stock exchange expect a quiet quarter.",
        "A survey found that {n} percent of managers plan to raise prices.",
        "Contractors postponed maintenance on {n} kilometres of road.",
        "Court filings show that disputes over late payments are becoming more common.",
        "The city council widened the ring road over {n} weekends.",
        "Demand for second-hand machinery stayed firm.",
        "Several family firms are looking for new owners.",
        "Warehouse rents have climbed for {n} quarters in a row.",
        "A long strike at the depots was settled after {n} days.",
        "Apprentices now make up {n} percent of the workforce in some trades.",
        "The regional airport added {n} cargo slots a week.",
    ),
    questions={
        "hq": ("1-hop", ("Where is {x} headquartered?", "Which city holds the head office of {x}?"),
               ("headquarters", "head office")),
        "chair": ("1-hop", ("Who chairs {x}?", "Who is the chair of the board of {x}?"), ("chair", "board")),
        "maker": ("1-hop", ("Which company manufactures the {p}?", "Who makes the {p}?"), ("product", "manufacturer")),
        "founder": ("1-hop", ("Who founded {x}?", "Who is the founder of {x}?"), ("founder",)),
        "maker-hq": ("2-hop", ("Where is the company that manufactures the {p} headquartered?",),
                     ("manufacturer", "headquarters")),
        "acquirer-chair": ("2-hop", ("Who chairs the company that acquired {x}?",), ("acquisition", "chair")),
        "maker-founder": ("2-hop", ("Who founded the company that manufactures the {p}?",),
                          ("manufacturer", "founder")),
        "products": ("list", ("Which products does {x} manufacture?",), ("products", "manufactures")),
        "acquisitions": ("list", ("Which companies has {x} acquired?",), ("acquisitions", "takeover")),
        "suppliers": ("list", ("Which companies supply {x}?",), ("suppliers", "components")),
        "staff": ("list", ("Who works at {x}?",), ("employees", "staff")),
        "plants": ("list", ("In which cities does {x} operate plants?",), ("plants", "factories")),
        "partners": ("list", ("Which companies cooperate with {x}?",), ("partners", "cooperation")),
        "founded-first": ("comparison", ("Which was founded first, {x} or {y}?", "Which company is older, {x} or {y}?",
                                         "Was {x} founded before {y}?"), ("founding year", "founded")),
        "more-employees": ("comparison", ("Which has more employees, {x} or {y}?",
                                          "Does {x} employ more people than {y}?",
                                          "Which is the bigger employer, {x} or {y}?"), ("employees", "headcount")),
        "larger-revenue": ("comparison", ("Which has the larger revenue, {x} or {y}?", "Does {x} earn more than {y}?",
                                          "Which company had higher sales, {x} or {y}?"), ("revenue", "sales")),
        "chair-acquirer-maker": ("3-hop", ("Who chairs the firm that acquired the maker of the {p}?",
                                           "Who is the board chair of the company that took over the manufacturer "
                                           "of the {p}?"), ("manufacturer", "acquisition", "chair")),
        "hq-acquirer-maker": ("3-hop", ("Where is the head office of the company that acquired the maker of the "
                                        "{p}?",), ("manufacturer", "acquisition", "headquarters")),
        "founder-acquirer-employer": ("3-hop", ("Who founded the company that acquired the employer of {p}?",
                                                "Who is the founder of the firm that took over the company {p} "
                                                "works for?"), ("employer", "acquisition", "founder")),
        "hq-acquirer-chaired": ("3-hop", ("In which city is the company headquartered that acquired the firm "
                                          "chaired by {p}?",), ("chair", "acquisition", "headquarters")),
        "alias-ceo": ("alias by full name", ("Who is the chief executive of {x}?", "Who leads {x} as chief executive?"),
                      ("chief executive",)),
        "alias-headcount": ("alias by full name", ("How many people does {x} employ?", "What is the headcount of {x}?"),
                            ("employees", "headcount")),
        "alias-chair": ("alias by alias", ("Who chairs {x}?", "Who is the chair of the board of {x}?"),
                        ("chair", "board")),
        "alias-founded": ("alias by alias", ("In which year was {x} founded?", "When was {x} founded?"),
                          ("founded", "founding year")),
        "para-hq": ("paraphrase", ("Where is {x} based?", "Which city is home to {x}?"), ("based", "home city")),
        "para-ceo": ("paraphrase", ("Who runs {x}?", "Who is the boss of {x}?"), ("runs", "boss")),
        "para-chair": ("paraphrase", ("Who presides over the directors of {x}?", "Who is the presiding director "
                                      "at {x}?"), ("presides", "directors")),
        "para-founder": ("paraphrase", ("Who started {x}?", "Who set up {x}?"), ("started", "origin")),
        "para-acquisitions": ("paraphrase", ("Which companies did {x} buy?", "Which firms has {x} bought?"),
                              ("bought", "purchases")),
        "para-lender": ("paraphrase", ("Which bank finances {x}?", "Who puts up the money for {x}?"),
                        ("bank", "finances")),
        "para-auditor": ("paraphrase", ("Who checks the books of {x}?", "Which firm goes over the bookkeeping of {x}?"),
                         ("checks", "bookkeeping")),
        "fu-hq": ("follow-up", ("Where is its head office?", "And where are they headquartered?"), ("headquarters",)),
        "fu-chair": ("follow-up", ("Who chairs its board?", "Who is their chair?"), ("chair", "board")),
        "fu-founded": ("follow-up", ("When was it founded?", "In which year were they founded?"),
                       ("founded", "founding year")),
        "fu-products": ("follow-up", ("What do they manufacture?", "Which products does it make?"),
                        ("products", "manufactures")),
        "attributes": ("attribute list", ("When was {x} founded, how many people does it employ and what is its "
                                          "revenue?", "Give the founding year, the headcount and the annual revenue "
                                          "of {x}."), ("founded", "employees", "revenue")),
        "now-headcount": ("updated", ("How many people does {x} employ today?", "What is the current headcount of "
                                      "{x}?"), ("employees", "headcount")),
        "now-revenue": ("updated", ("What is the annual revenue of {x} now?", "How much revenue does {x} currently "
                                    "report?"), ("revenue",)),
        "negative": ("negative", ("Does {x} make the {p}?", "Is the {p} one of the products of {x}?"),
                     ("products", "manufactures")),
        "count-products": ("count", ("How many products does {x} make?", "How many different products does {x} "
                                     "manufacture?"), ("products",)),
        "count-acquisitions": ("count", ("How many companies has {x} acquired?",), ("acquisitions",)),
        "before": ("temporal", ("Who led {x} before {z}?", "Who was chief executive of {x} before {z} took over?"),
                   ("chief executive", "predecessor")),
        "after": ("temporal", ("Who succeeded {w} as chief executive of {x}?", "Who followed {w} as chief executive "
                               "of {x}?"), ("chief executive", "successor")),
        "sector": ("no entity", ("Which firms are active in the {sector} sector?", "Which companies belong to the "
                                 "{sector} sector?"), ("{sector}", "sector")),
        "sector-before": ("no entity", ("Which {sector} companies were founded before {year}?",),
                          ("{sector}", "founded")),
        "sector-larger": ("no entity", ("Which {sector} firms employ more than {n} people?",),
                          ("{sector}", "employees")),
    },
    history=(("Tell me about {x}.", "Which sector is {x} in?", "I am looking into {x}."),
             ("{x} is active in the {sector} sector.", "{x} is one of the {sector} companies in the documents.")),
    relation_keywords={
        "hq": ("headquarters", "head office"), "founder": ("founder", "founded"), "chair": ("chair", "board"),
        "ceo": ("chief executive", "leadership"), "former-ceo": ("former chief executive", "tenure"),
        "succeeded": ("succession", "successor"), "makes": ("product", "manufactures"),
        "acquired": ("acquisition", "takeover"), "supplies": ("supplier", "components"),
        "partner": ("cooperation", "partnership"), "lender": ("lender", "credit line"),
        "auditor": ("auditor", "audit"), "plant": ("plant", "factory"), "fair": ("trade fair", "exhibition"),
        "employs": ("employee", "staff"), "column": ("commentary",),
    },
    loose_keywords=("mentioned together",),
    sectors={"maritime": "maritime", "agricultural": "agricultural", "textile": "textile", "mining": "mining",
             "aviation": "aviation", "pharmaceutical": "pharmaceutical", "railway": "railway",
             "food": "food-processing", "energy": "energy", "printing": "printing", "banking": "banking",
             "accounting": "accounting"},
    months=("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
            "November", "December"),
    paraphrase_words=("based", "home", "runs", "run", "boss", "presides", "presiding", "directors", "started",
                      "set up", "buy", "bought", "purchase", "purchased", "finances", "finance", "money", "checks",
                      "books", "bookkeeping"),
)


def wording(language: str) -> Wording:
    if language == "zh":
        from bench.shapes_zh import ZH  # it builds on this module's Wording

        return ZH
    if language != "en":
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, not {language!r}")
    return EN


@dataclass(frozen=True)
class Relation:
    kind: str       # a key of Wording.relation_keywords
    source: str
    target: str


@dataclass(frozen=True)
class Statement:
    """One sentence of a document: which template of which kind, its slots (names, years, raw
    numbers, ISO dates, sector keys), its text, the relations it states, the entities it describes
    (an attribute stated in passing), and the names in it that only name another name's entity."""
    kind: str
    template: int
    slots: tuple[tuple[str, str], ...]
    text: str
    relations: tuple[Relation, ...]
    about: tuple[str, ...]
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShapeQuestion(Question):
    """A question of bench/multihop_world's kind (``kind`` is the shape, ``shape`` its template key),
    with the turns before it, a value the context should no longer need (an updated fact's old
    value), and what a translation needs (the template index and the slots)."""
    history: tuple[tuple[str, str], ...] = ()    # (role, content), oldest first
    stale: tuple[str, ...] = ()
    template: int = 0
    slots: tuple[tuple[str, str], ...] = ()


@dataclass
class Company:
    """What is true of one company (the world's answer key)."""
    name: str
    sector: str
    hub: bool = False
    founded: int = 0
    founder: str = ""
    hq: str = ""
    chair: str = ""
    ceos: list[tuple[str, int, int]] = field(default_factory=list)   # (person, from, to): to 0 for the current one
    headcount: int = 0
    revenue: str = ""
    stale: tuple[str, str] | None = None   # (attribute, old value): headcount / revenue before the update
    products: list[str] = field(default_factory=list)
    staff: list[str] = field(default_factory=list)
    acquisitions: list[str] = field(default_factory=list)
    acquirer: str = ""
    alias: str = ""
    suppliers: list[str] = field(default_factory=list)
    partners: list[str] = field(default_factory=list)
    plants: list[str] = field(default_factory=list)
    fairs: list[str] = field(default_factory=list)
    lender: str = ""
    auditor: str = ""


@dataclass
class ShapesWorld:
    names: dict[str, str] = field(default_factory=dict)            # every name (aliases too) -> entity type
    aliases: dict[str, str] = field(default_factory=dict)          # alias -> the full name
    companies: dict[str, Company] = field(default_factory=dict)
    statements: list[Statement] = field(default_factory=list)
    documents: list[tuple[str, str]] = field(default_factory=list)  # (name, text)
    layouts: list[list[Statement | tuple[int, int]]] = field(default_factory=list)  # prose as (template, number)
    questions: list[ShapeQuestion] = field(default_factory=list)
    hubs: list[str] = field(default_factory=list)
    language: str = "en"
    wording: Wording = EN
    syllables: dict[str, tuple[str, ...]] = field(default_factory=dict)   # a name's word -> its syllables

    @property
    def true_entities(self) -> int:
        """Entities in the world: an alias and its full name are one."""
        return len(self.names) - len(self.aliases)

    @property
    def relation_keywords(self) -> dict[str, tuple[str, ...]]:
        return self.wording.relation_keywords

    @property
    def loose_keywords(self) -> tuple[str, ...]:
        return self.wording.loose_keywords

    def by_sentence(self) -> dict[str, Statement]:
        return {s.text: s for s in self.statements}

    def value(self, company: str, attribute: str) -> str:
        """An attribute of a company as the text writes it."""
        c = self.companies[company]
        written = {"founded": str(c.founded), "headcount": self.wording.number(c.headcount),
                   "revenue": self.wording.money(c.revenue)}
        return written[attribute]


class _Builder:
    def __init__(self, doc_count: int, seed: int, questions: int, wording: Wording) -> None:
        self.rng = random.Random(seed)
        self.doc_count, self.per_shape, self.wording = doc_count, questions, wording
        self.world = ShapesWorld(language=wording.language, wording=wording)
        self.english: dict[str, str] = {}   # a name -> the English name it renders
        self.words: set[str] = set()
        self.numbers: set[str] = set()

    # -- names -------------------------------------------------------------------------------------
    def word(self) -> str:
        return unique_word(self.rng, self.words, self.world.syllables, SYLLABLES, (2, 2, 3))

    def entity(self, english: str, kind: str) -> str:
        name = self.wording.name(english, kind, self.world.syllables)
        self.english[name] = english
        self.world.names[name] = kind
        return name

    def person(self) -> str:
        return self.entity(f"{self.word()} {self.word()}", "Person")

    def city(self) -> str:
        return self.entity(self.word(), "Location")

    def company(self, sector: str, hub: bool = False) -> Company:
        name = self.entity(f"{self.word()} {self.rng.choice(COMPANY_SUFFIXES)}", "Organization")
        self.world.companies[name] = Company(name, sector, hub)
        return self.world.companies[name]

    def product(self, sector: str) -> str:
        return self.entity(f"{self.word()} {self.rng.choice(SECTORS[sector])}", "Artifact")

    def acronym(self, name: str) -> str:
        """A short form made as real ones are: in English the name's first letter and two more of its
        letters in order ("KVB" of "Kravon Brothers"); in other languages the wording's (Chinese: the
        name's first character and its descriptor's, "贝兄" of "贝温尔兄弟集团"). None stands inside
        another name, nor holds one."""
        english = self.english[name]
        letters = [c for c in english[1:] if c.isalpha()]
        while True:
            i, j = sorted(self.rng.sample(range(len(letters)), 2))
            acronym = (english[0] + letters[i] + letters[j]).upper()
            if acronym not in self.world.names and acronym not in self.english.values():
                break
        for short in self.wording.short_forms(name, english, acronym):
            if not any(_inside(short, other) or _inside(other, short) for other in self.world.names):
                self.english[short] = acronym
                self.world.names[short] = "Organization"
                return short
        raise ValueError(f"no short form for {name}")

    def unique(self, low: int, high: int, scale: int = 1) -> int:
        """A number no other attribute of the world has (as written: headcount 4,270, revenue 412.5)."""
        while True:
            value = self.rng.randint(low, high)
            if f"{scale}:{value}" not in self.numbers:
                self.numbers.add(f"{scale}:{value}")
                return value

    def some(self, pool: list[str], low: int, high: int) -> list[str]:
        return self.rng.sample(pool, min(len(pool), self.rng.randint(low, high)))

    def spread(self, pool: list[Company], count: int) -> list[Company]:
        """``count`` of ``pool``, none twice until every one has been drawn."""
        drawn: list[Company] = []
        while len(drawn) < count:
            drawn += self.rng.sample(pool, min(len(pool), count - len(drawn)))
        return drawn

    def revenue(self) -> str:
        return f"{self.unique(100, 9999, 10) / 10:.1f}"   # under 1,000: never holds a year or another value

    # -- statements and documents -------------------------------------------------------------------
    def say(self, kind: str, **slots: str) -> Statement:
        templates = self.wording.statements[kind]
        template = self.rng.randrange(len(templates))
        relations, about, aliases = STATEMENTS[kind]
        statement = Statement(kind, template, tuple(slots.items()), self.wording.render(templates[template], slots),
                              tuple(Relation(k, slots[s], slots[t]) for k, s, t in relations),
                              tuple(slots[s] for s in about), tuple(slots[s] for s in aliases))
        self.world.statements.append(statement)
        return statement

    def date(self, first: int, last: int) -> str:
        return f"{self.rng.randint(first, last)}-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"

    def document(self, prefix: str, years: tuple[int, int], statements: list[Statement]) -> None:
        layout: list[Statement | tuple[int, int]] = [
            (self.rng.randrange(len(self.wording.prose)), self.rng.randint(2, 99))
            for _ in range(self.rng.randint(10, 18))]
        for statement in statements:
            layout.insert(self.rng.randint(0, len(layout)), statement)
        layout.insert(0, self.say("dateline", date=self.date(*years)))
        self.world.layouts.append(layout)
        text = self.wording.joiner.join(part.text if isinstance(part, Statement)
                                        else self.wording.prose[part[0]].format(n=part[1]) for part in layout)
        self.world.documents.append((f"{prefix}-{len(self.world.documents):04d}.txt", text))

    def documents(self, prefix: str, years: tuple[int, int], statements: list[Statement],
                  size: tuple[int, int]) -> None:
        """``statements`` shuffled into documents of ``size`` statements each."""
        self.rng.shuffle(statements)
        while statements:
            count = min(len(statements), self.rng.randint(*size))
            self.document(prefix, years, [statements.pop() for _ in range(count)])

    # -- the world ---------------------------------------------------------------------------------
    def build(self) -> ShapesWorld:
        rng, world = self.rng, self.world
        per_sector = max(2, round(self.doc_count / 36))   # 84 companies beside the hubs in 250 documents
        # a head office's city is no other company's and hosts no plant or fair: found in a context, it
        # answers for that company alone; plants and fairs are in other towns
        venues = [self.city() for _ in range(max(12, self.doc_count // 10))]
        regular = [self.company(sector) for sector in SECTORS for _ in range(per_sector)]
        hubs = [self.company(MAKERS[i % len(MAKERS)], hub=True) for i in range(max(2, self.doc_count // 40))]
        world.hubs = [h.name for h in hubs]
        everyone = regular + hubs
        makers = [c for c in regular if SECTORS[c.sector]]
        banks = [c for c in regular if c.sector == "banking"]
        auditors = [c for c in regular if c.sector == "accounting"]

        span = max(140, 2 * len(everyone))
        for company, year in zip(everyone, rng.sample(range(FOUNDED_BEFORE - span, FOUNDED_BEFORE), len(everyone)),
                                 strict=True):
            company.founded, company.founder = year, self.person()
            company.hq, company.chair = self.city(), self.person()
            company.headcount = self.unique(20_000, 99_000) if company.hub else self.unique(1_000, 19_999)
            company.revenue = self.revenue()
        for company in rng.sample(makers, max(2, min(20, len(makers) // 3))):
            company.alias = self.acronym(company.name)
            world.aliases[company.alias] = company.name
        plain = [c for c in makers if not c.alias]
        for company in makers:
            company.products = [self.product(company.sector) for _ in range(rng.choice((1, 2, 2, 3, 3, 4, 5)))]
            company.staff = [self.person() for _ in range(rng.choice((0, 1, 1, 2)))]
        for hub in hubs:
            hub.products = [self.product(hub.sector) for _ in range(rng.randint(16, 20))]
            hub.staff = [self.person() for _ in range(rng.randint(14, 18))]
        self.deals(hubs, plain)
        for company in everyone:
            self.leaders(company)
        for hub in hubs:
            others = [c.name for c in plain]
            hub.suppliers = self.some(others, 10, 14)
            hub.partners = self.some([c for c in others if c not in hub.suppliers], 10, 14)
            hub.plants = self.some(venues, 4, 6)
            hub.fairs = self.some([c for c in venues if c not in hub.plants], 4, 6)
        for hub, bank, auditor in zip(hubs, self.spread(banks, len(hubs)), self.spread(auditors, len(hubs)),
                                      strict=True):   # each hub its own bank and auditor while there are enough
            hub.lender, hub.auditor = bank.name, auditor.name
        for company in regular:
            if rng.random() < 0.5:
                company.partners = [rng.choice([c.name for c in plain if c is not company])]
            if company.products and rng.random() < 0.3:
                company.plants = [rng.choice(venues)]
        updated = [c for c in regular if not c.alias]
        for i, company in enumerate(rng.sample(updated, min(self.per_shape, max(2, len(updated) // 2)))):
            if i % 2:
                company.stale, company.revenue = ("revenue", company.revenue), self.revenue()
            else:
                company.stale = ("headcount", self.wording.number(company.headcount))
                company.headcount = self.unique(1_000, 19_999)
        self.write(regular, hubs, venues, plain)
        while len(world.documents) < self.doc_count:   # columns: names beside names, nothing asked
            self.document("column", (2016, 2024), [
                self.say("column", p=self.person(), c=rng.choice(plain + hubs).name)
                for _ in range(rng.randint(1, 3))])
        stated = {name for s in world.statements for name in (n for r in s.relations for n in (r.source, r.target))}
        stated |= {name for s in world.statements for name in (*s.about, *s.aliases)}
        world.names = {name: kind for name, kind in world.names.items() if name in stated}   # drawn, never used
        _Questions(self).ask()
        return world

    def deals(self, hubs: list[Company], plain: list[Company]) -> None:
        """Hubs take over four to seven plain makers each, and a few plain makers one more each."""
        rng = self.rng
        pool = plain[:]
        rng.shuffle(pool)
        for hub in hubs:
            for _ in range(min(rng.randint(4, 7), len(pool) // len(hubs))):
                target = pool.pop()
                target.acquirer = hub.name
                hub.acquisitions.append(target.name)
        buyers = pool[: max(2, len(plain) // 6)]
        targets = pool[len(buyers):]
        for buyer, target in zip(buyers, targets, strict=False):
            target.acquirer = buyer.name
            buyer.acquisitions.append(target.name)

    def leaders(self, company: Company) -> None:
        """The chief executives, the last one current; a third of companies (none with an alias) had one
        or two before."""
        rng = self.rng
        since = rng.randint(1996, 2022)
        chain = [(self.person(), since, 0)]
        for _ in range(0 if company.alias else rng.choice((0, 0, 1, 1, 2))):
            start = max(1981, since - rng.randint(4, 12))
            if start >= since:
                break
            chain.insert(0, (self.person(), start, since))
            since = start
        company.ceos = chain

    def write(self, regular: list[Company], hubs: list[Company], venues: list[str], plain: list[Company]) -> None:
        rng, say = self.rng, self.say
        extra_products: list[Statement] = []
        for company in regular + hubs:   # a profile each: under the full name, an alias never
            c = company.name
            facts = [say("founder-sector", c=c, p=company.founder, year=str(company.founded), sector=company.sector)
                     if rng.random() < 0.4 else
                     say("founder", c=c, p=company.founder, year=str(company.founded)),
                     say("hq", c=c, city=company.hq), say("chair", c=c, p=company.chair)]
            if not any(s.kind == "founder-sector" for s in facts):
                facts.insert(rng.randint(0, len(facts)), say("sector", c=c, sector=company.sector))
            if company.hub:
                facts += [say("lender", c=company.lender, o=c), say("auditor", c=company.auditor, o=c)]
            else:
                shown = 1 if company.alias else rng.randint(1, 2)
                facts += [say("makes", c=c, prod=p) for p in company.products[:shown]]
                named = company.alias or c
                for p in company.products[shown:]:
                    extra_products.append(say("fair-makes", c=named, prod=p, city=rng.choice(venues))
                                          if rng.random() < 0.5 else say("makes", c=named, prod=p))
                facts += [say("employs", p=p, c=c) for p in company.staff]
                facts += [say("partner", c=c, o=o) for o in company.partners]
                facts += [say("plant", c=c, city=city) for city in company.plants]
            rng.shuffle(facts)
            self.document("hub" if company.hub else "profile", (2016, 2024), facts)
        for hub in hubs:   # dozens of relations, in news items of five to seven
            h = hub.name
            self.documents("news", (2021, 2024), [
                *(say("makes", c=h, prod=p) for p in hub.products),
                *(say("employs", p=p, c=h) for p in hub.staff),
                *(say("acquired", a=h, t=t, year=str(rng.randint(1985, 2022))) for t in hub.acquisitions),
                *(say("supplies", c=s, o=h) for s in hub.suppliers),
                *(say("partner", c=h, o=o) for o in hub.partners),
                *(say("plant", c=h, city=city) for city in hub.plants),
                *(say("fair", c=h, city=city) for city in hub.fairs)], (7, 9))
        self.documents("deal", (2021, 2024), [
            say("acquired", a=c.name, t=t, year=str(rng.randint(1985, 2022)))
            for c in regular if not c.hub for t in c.acquisitions], (2, 2))
        self.documents("catalogue", (2020, 2024), extra_products, (5, 7))
        results = []
        for company in regular + hubs:   # the figures of 2016-2019: an updated value's old one
            named = company.alias or company.name
            headcount, revenue = company.headcount, company.revenue
            if company.stale and company.stale[0] == "headcount":
                headcount = int(company.stale[1].replace(",", ""))
            elif company.stale:
                revenue = company.stale[1]
            if rng.random() < 0.4:
                results.append(say("headcount-revenue", c=named, n=str(headcount), r=revenue))
            else:
                results += [say("headcount", c=named, n=str(headcount)), say("revenue", c=named, r=revenue)]
        self.documents("results", (2016, 2019), results, (7, 9))
        leadership = []
        for company in regular + hubs:
            named = company.alias or company.name
            person, since, _ = company.ceos[-1]
            leadership.append(say("ceo", p=person, c=named, year=str(since)))
            for (old, start, end), (new, _, _) in zip(company.ceos, company.ceos[1:], strict=False):
                leadership.append(say("succession", new=new, old=old, c=named, year=str(end))
                                  if rng.random() < 0.5 else
                                  say("ceo-past", p=old, c=named, y1=str(start), y2=str(end)))
        self.documents("leadership", (2023, 2024), leadership, (4, 6))
        self.documents("announcement", (2018, 2024), [
            say("alias-plant", f=c.name, k=c.alias, city=rng.choice(venues)) if rng.random() < 0.5 else
            say("alias-partner", f=c.name, k=c.alias, o=rng.choice(plain).name)
            for c in regular if c.alias], (2, 2))
        updates = []
        for company in regular:
            if company.stale and company.stale[0] == "headcount":
                updates.append(say("headcount-now", c=company.name, n=str(company.headcount)))
            elif company.stale:
                updates.append(say("revenue-now", c=company.name, r=company.revenue))
        self.documents("update", (2023, 2024), updates, (3, 5))


class _Questions:
    """The questions of every shape, at most ``per_shape`` each, drawn from the world's answer key."""

    def __init__(self, builder: _Builder) -> None:
        self.rng, self.world, self.wording = builder.rng, builder.world, builder.wording
        self.per_shape = builder.per_shape
        companies = list(self.world.companies.values())
        self.plain = [c for c in companies if not c.alias and not c.hub]
        self.makers = [c for c in self.plain if c.products]
        self.hubs = [c for c in companies if c.hub]
        self.aliased = [c for c in companies if c.alias]

    def question(self, key: str, gold: list[str], history: tuple[tuple[str, str], ...] = (),
                 stale: tuple[str, ...] = (), **slots: str) -> ShapeQuestion:
        """The oracle's low keywords are the names the question gives, or for a follow-up the one its
        earlier turn gave (a keyword call resolves "its"); its high ones, the shape's themes."""
        kind, phrasings, themes = self.wording.questions[key]
        template = self.rng.randrange(len(phrasings))
        text = self.wording.render(phrasings[template], slots)
        low = tuple(slots[s] for s in QUESTION_NAMES if s in slots)
        high = tuple(self.wording.render(theme, slots) for theme in themes)
        return ShapeQuestion(kind, text, tuple(dict.fromkeys(gold)), low, high, key, low[0] if low else "",
                             history, stale, template, tuple(slots.items()))

    def take(self, questions: list[ShapeQuestion]) -> None:
        self.world.questions.extend(questions[: self.per_shape])

    def draw(self, companies: list[Company], count: int | None = None) -> list[Company]:
        """``count`` (per_shape by default) of ``companies`` in a random order, none twice."""
        pool = companies[:]
        self.rng.shuffle(pool)
        return pool[: self.per_shape if count is None else count]

    def ask(self) -> None:
        for shape in (self.one_hop, self.two_hop, self.lists, self.comparisons, self.three_hop, self.aliases,
                      self.paraphrases, self.follow_ups, self.attribute_lists, self.updates, self.negatives,
                      self.counts, self.temporal, self.no_entity):
            shape()

    def one_hop(self) -> None:
        q, rng = self.question, self.rng
        asked = []
        for i, company in enumerate(self.draw(self.makers)):
            c = company.name
            asked.append([q("hq", [company.hq], x=c), q("chair", [company.chair], x=c),
                          q("maker", [c], p=rng.choice(company.products)), q("founder", [company.founder], x=c)][i % 4])
        self.take(asked)

    def two_hop(self) -> None:
        q, rng, companies = self.question, self.rng, self.world.companies
        acquired = [c for c in self.plain if c.acquirer]
        asked = []
        for i in range(self.per_shape):
            if i % 3 == 1 and acquired:
                target = acquired[i // 3 % len(acquired)]
                buyer = companies[target.acquirer]
                asked.append(q("acquirer-chair", [buyer.name, buyer.chair], x=target.name))
                continue
            maker = rng.choice(self.makers)
            product = rng.choice(maker.products)
            asked.append(q("maker-hq", [maker.name, maker.hq], p=product) if i % 3 == 0 else
                         q("maker-founder", [maker.name, maker.founder], p=product))
        self.take(asked)

    def lists(self) -> None:
        q = self.question
        by_kind = [[q("products", h.products, x=h.name) for h in self.hubs],
                   [q("acquisitions", h.acquisitions, x=h.name) for h in self.hubs],
                   [q("suppliers", h.suppliers, x=h.name) for h in self.hubs],
                   [q("staff", h.staff, x=h.name) for h in self.hubs],
                   [q("plants", h.plants, x=h.name) for h in self.hubs],
                   [q("partners", h.partners, x=h.name) for h in self.hubs]]
        self.take([question for kind in by_kind for question in kind])

    def comparisons(self) -> None:
        q, rng, value = self.question, self.rng, self.world.value
        candidates = [c for c in self.plain + self.hubs]
        steady = [c for c in candidates if not c.stale]   # a figure that changed would have two answers
        asked = []
        for i in range(self.per_shape):
            key, attribute, pool = [("founded-first", "founded", candidates), ("more-employees", "headcount", steady),
                                    ("larger-revenue", "revenue", steady)][i % 3]
            x, y = rng.sample(pool, 2)
            asked.append(q(key, [x.name, y.name, value(x.name, attribute), value(y.name, attribute)],
                           x=x.name, y=y.name))
        self.take(asked)

    def three_hop(self) -> None:
        q, companies = self.question, self.world.companies
        acquired = [c for c in self.plain if c.acquirer]
        asked = []
        for i, target in enumerate(self.draw(acquired)):
            buyer = companies[target.acquirer]
            kind = i % 4
            if kind == 2 and not target.staff:
                kind = 0
            if kind == 0 and target.products:
                asked.append(q("chair-acquirer-maker", [target.name, buyer.name, buyer.chair],
                               p=self.rng.choice(target.products)))
            elif kind == 1 and target.products:
                asked.append(q("hq-acquirer-maker", [target.name, buyer.name, buyer.hq],
                               p=self.rng.choice(target.products)))
            elif kind == 2:
                asked.append(q("founder-acquirer-employer", [target.name, buyer.name, buyer.founder],
                               p=self.rng.choice(target.staff)))
            else:
                asked.append(q("hq-acquirer-chaired", [target.name, buyer.name, buyer.hq], p=target.chair))
        self.take(asked)

    def aliases(self) -> None:
        """By the full name, what only the alias's documents state; by the alias, what only the full
        name's do."""
        q = self.question
        full, short = [], []
        for company in self.draw(self.aliased, max(1, self.per_shape // 2)):
            value = self.world.value(company.name, "headcount")
            full += [q("alias-ceo", [company.ceos[-1][0]], x=company.name),
                     q("alias-headcount", [value], x=company.name)]
            short += [q("alias-chair", [company.chair], x=company.alias),
                      q("alias-founded", [str(company.founded)], x=company.alias)]
        self.take(full)
        self.take(short)

    def paraphrases(self) -> None:
        q = self.question
        asked = []
        for hub in self.hubs:
            h = hub.name
            asked += [q("para-hq", [hub.hq], x=h), q("para-ceo", [hub.ceos[-1][0]], x=h),
                      q("para-chair", [hub.chair], x=h), q("para-founder", [hub.founder], x=h),
                      q("para-acquisitions", hub.acquisitions, x=h), q("para-lender", [hub.lender], x=h),
                      q("para-auditor", [hub.auditor], x=h)]
        self.take(asked)

    def follow_ups(self) -> None:
        q, rng = self.question, self.rng
        users, assistants = self.wording.history
        asked = []
        for i, company in enumerate(self.draw(self.makers)):
            slots = {"x": company.name, "sector": company.sector}
            history = (("user", self.wording.render(rng.choice(users), slots)),
                       ("assistant", self.wording.render(rng.choice(assistants), slots)))
            key, gold = [("fu-hq", [company.hq]), ("fu-chair", [company.chair]),
                         ("fu-founded", [str(company.founded)]), ("fu-products", company.products)][i % 4]
            asked.append(q(key, gold, history, x=company.name))
        self.take(asked)

    def attribute_lists(self) -> None:
        value = self.world.value
        asked = [self.question("attributes", [value(c.name, "founded"), value(c.name, "headcount"),
                                              value(c.name, "revenue")], x=c.name)
                 for c in self.draw([c for c in self.plain + self.hubs if not c.stale])]
        self.take(asked)

    def updates(self) -> None:
        asked = []
        for company in [c for c in self.plain if c.stale]:
            attribute, old = company.stale or ("", "")
            key = "now-headcount" if attribute == "headcount" else "now-revenue"
            old = old if attribute == "headcount" else self.wording.money(old)
            asked.append(self.question(key, [self.world.value(company.name, attribute)], stale=(old,), x=company.name))
        self.take(asked)

    def negatives(self) -> None:
        asked = []
        for company in self.draw(self.makers):
            others = [p for c in self.makers + self.hubs if c.sector == company.sector and c is not company
                      for p in c.products]
            if others:
                asked.append(self.question("negative", company.products, x=company.name, p=self.rng.choice(others)))
        self.take(asked)

    def counts(self) -> None:
        q = self.question
        asked = [q("count-acquisitions", h.acquisitions, x=h.name) for h in self.hubs]
        asked += [q("count-products", c.products, x=c.name)
                  for c in self.draw([c for c in self.makers if len(c.products) >= 2], self.per_shape - len(asked))]
        self.rng.shuffle(asked)
        self.take(asked)

    def temporal(self) -> None:
        asked = []
        for company in self.plain + self.hubs:
            for (old, _, _), (new, _, _) in zip(company.ceos, company.ceos[1:], strict=False):
                asked.append(self.question("before", [old], x=company.name, z=new) if self.rng.random() < 0.7 else
                             self.question("after", [new], x=company.name, w=old))
        self.rng.shuffle(asked)
        self.take(asked)

    def no_entity(self) -> None:
        """A sector's firms; those founded before a year; those employing more than a number (a threshold
        no updated figure straddles, past no company named only by its alias there)."""
        q = self.question
        asked = []
        companies = list(self.world.companies.values())
        for sector in SECTORS:
            members = [c for c in companies if c.sector == sector]
            asked.append(q("sector", [c.name for c in members], sector=sector))
            by_age = sorted(members, key=lambda c: c.founded)
            k = self.rng.randint(1, min(3, len(by_age) - 1))
            asked.append(q("sector-before", [c.name for c in by_age[:k]], sector=sector,
                           year=str(by_age[k - 1].founded + 1)))
            by_size = sorted(members, key=lambda c: -c.headcount)
            for k in range(min(3, len(by_size) - 1), 0, -1):
                threshold = (by_size[k - 1].headcount + by_size[k].headcount) // 2 // 100 * 100
                if threshold < by_size[k].headcount or any(c.alias for c in by_size[:k]):
                    continue
                if all((c.headcount > threshold) == (_old_headcount(c) > threshold) for c in members):
                    asked.append(q("sector-larger", [c.name for c in by_size[:k]], sector=sector, n=str(threshold)))
                    break
        self.rng.shuffle(asked)
        self.take(asked)


def _inside(short: str, name: str) -> bool:
    """Whether ``short`` stands in ``name``: as a word of a spaced name, anywhere in an unspaced one."""
    return short in name.split(" ") if short.isascii() else short in name


def _old_headcount(company: Company) -> int:
    if company.stale and company.stale[0] == "headcount":
        return int(company.stale[1].replace(",", ""))
    return company.headcount


def build_world(doc_count: int = 250, seed: int = 32, questions: int = 40, language: str = "en") -> ShapesWorld:
    """The world of ``doc_count`` documents or a few more, with at most ``questions`` questions of
    each shape (fewer where the world has fewer subjects: one per hub and relation kind, say)."""
    return _Builder(doc_count, seed, questions, wording(language)).build()
