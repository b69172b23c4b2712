"""Extraction: schema, prompts, the tolerant reply parser and the merging of passes."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.extraction.prompts import extraction_messages, extraction_schema, gleaning_messages
from proxy.extraction.results import (
    DEFAULT_ENTITY_TYPES,
    ExtractedEntity,
    ExtractedRelation,
    ExtractionFormatError,
    ExtractionResult,
    merge_passes,
    name_key,
    normalise_name,
    parse_extraction,
)

TYPES = DEFAULT_ENTITY_TYPES


def parse(data: object) -> ExtractionResult:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return parse_extraction(text, entity_types=TYPES)


def entity(name: str, type: str = "Person", description: str = "") -> dict:
    return {"name": name, "type": type, "description": description}


def relation(source: str, target: str, **extra: object) -> dict:
    return {"source": source, "target": target, "keywords": [], "description": "",
            "weight": 5, **extra}


# --- schema ------------------------------------------------------------------------------


def test_schema_top_level():
    schema = extraction_schema()
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"entities", "relations"}
    assert schema["required"] == ["entities", "relations"]
    json.dumps(schema)


def test_schema_items():
    props = extraction_schema()["properties"]
    ent, rel = props["entities"], props["relations"]
    assert ent["type"] == rel["type"] == "array"
    ent_item, rel_item = ent["items"], rel["items"]
    assert ent_item["type"] == rel_item["type"] == "object"
    assert {k: v["type"] for k, v in ent_item["properties"].items()} == {
        "name": "string", "type": "string", "description": "string"}
    assert sorted(ent_item["required"]) == ["description", "name", "type"]
    assert {k: v["type"] for k, v in rel_item["properties"].items()} == {
        "source": "string", "target": "string", "keywords": "array",
        "description": "string", "weight": "number"}
    assert rel_item["properties"]["keywords"]["items"] == {"type": "string"}
    assert sorted(rel_item["required"]) == ["description", "keywords", "source", "target", "weight"]


def _check_schema_structure(node: object) -> None:
    """A hand check of the draft 2020-12 keywords we use."""
    assert isinstance(node, dict)
    assert node["type"] in {"object", "array", "string", "number"}
    if node["type"] == "object":
        assert set(node) == {"type", "properties", "required"}
        assert set(node["required"]) <= set(node["properties"])
        for child in node["properties"].values():
            _check_schema_structure(child)
    elif node["type"] == "array":
        assert set(node) == {"type", "items"}
        _check_schema_structure(node["items"])
    else:
        assert set(node) == {"type"}


def test_schema_is_well_formed():
    _check_schema_structure(extraction_schema())


# --- prompts -----------------------------------------------------------------------------


def test_extraction_messages():
    messages = extraction_messages("Ada Lovelace met Babbage.", entity_types=("Person", "Machine"),
                                   language="Deutsch")
    assert [m["role"] for m in messages] == ["system", "user"]
    everything = "\n".join(m["content"] for m in messages)
    assert "Ada Lovelace met Babbage." in messages[1]["content"]
    assert "Person" in everything and "Machine" in everything and "Other" in everything
    assert "Deutsch" in everything
    assert "weight" in everything and "keywords" in everything


def test_gleaning_messages_list_previous_items():
    previous = ExtractionResult(
        (ExtractedEntity("Ada Lovelace", "Person", "x"),
         ExtractedEntity("Analytical Engine", "Artifact", "y")),
        (ExtractedRelation("Ada Lovelace", "Analytical Engine", ("wrote about",), "z", 8.0),),
    )
    messages = gleaning_messages("The passage.", previous, entity_types=TYPES, language="français")
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "The passage." in user
    assert "Ada Lovelace" in user and "Analytical Engine" in user
    assert "Ada Lovelace <-> Analytical Engine" in user
    assert "NaturalObject" in messages[0]["content"] and "français" in messages[0]["content"]
    assert "not repeat" in user.lower()
    assert '"entities": []' in user


def test_gleaning_messages_with_empty_previous():
    user = gleaning_messages("t", ExtractionResult(), entity_types=TYPES, language="English")[1]["content"]
    assert "(none)" in user


# --- decoding the reply --------------------------------------------------------------------


def test_plain_json():
    result = parse({"entities": [entity("Alice", description="A person.")], "relations": []})
    assert result.entities == (ExtractedEntity("Alice", "Person", "A person."),)
    assert result.relations == ()


def test_fenced_json():
    body = json.dumps({"entities": [entity("Alice")], "relations": []})
    assert parse(f"```json\n{body}\n```").entities[0].name == "Alice"
    assert parse(f"```\n{body}\n```").entities[0].name == "Alice"
    assert parse(f"Here you go:\n```json\n{body}\n```\nAnything else?").entities[0].name == "Alice"


def test_text_around_json():
    body = json.dumps({"entities": [entity("Alice")], "relations": []})
    result = parse(f"Sure! Here is the result: {body} Hope this helps {{:)}}")
    assert [e.name for e in result.entities] == ["Alice"]


def test_think_block_is_ignored():
    body = json.dumps({"entities": [entity("Alice")], "relations": []})
    assert parse(f"<think>maybe {{ this }}</think>{body}").entities[0].name == "Alice"


@pytest.mark.parametrize("content", [
    '{"entities": [{"name": "Alice", "type": "Person"',
    '```json\n{"entities": [{"name": "Alice"}, {"name": "B',
    "I could not find anything.",
    "",
    "   ",
])
def test_not_json_raises(content):
    with pytest.raises(ExtractionFormatError):
        parse_extraction(content, entity_types=TYPES)


@pytest.mark.parametrize("content", ["[]", '[{"name": "A"}]', '"text"', "42", "null", "true"])
def test_non_object_raises(content):
    with pytest.raises(ExtractionFormatError, match="object"):
        parse_extraction(content, entity_types=TYPES)


def test_format_error_is_value_error():
    assert issubclass(ExtractionFormatError, ValueError)


def test_deep_nesting_raises_format_error():
    with pytest.raises(ExtractionFormatError):
        parse_extraction("[" * 100_000 + "]" * 100_000, entity_types=TYPES)


def test_missing_keys_are_empty():
    assert parse({}).is_empty()
    assert parse({"entities": [entity("A")]}).relations == ()
    assert parse({"relations": [relation("A", "B")]}).entities == ()
    assert parse({"entities": "nope", "relations": {"a": 1}}).is_empty()


# --- items ----------------------------------------------------------------------------------


def test_malformed_items_are_dropped():
    result = parse({
        "entities": [
            "Alice", 42, None, [], {},
            {"name": ""}, {"name": "   "}, {"name": 7}, {"name": None},
            {"name": "X", "description": ["a"]}, {"name": "Y", "type": 3},
            entity("Bob"),
        ],
        "relations": [
            "A->B", {"source": "A"}, {"target": "B"}, {"source": "", "target": "B"},
            {"source": "A", "target": 3}, relation("A", "B", description=5),
            relation("Bob", "Carol"),
        ],
    })
    assert [e.name for e in result.entities] == ["Bob"]
    assert [(r.source, r.target) for r in result.relations] == [("Bob", "Carol")]


def test_optional_fields_default():
    result = parse({"entities": [{"name": "Alice"}],
                    "relations": [{"source": "Alice", "target": "Bob"}]})
    assert result.entities == (ExtractedEntity("Alice", "Other", ""),)
    assert result.relations == (ExtractedRelation("Alice", "Bob", (), "", 1.0),)


def test_whitespace_collapsed():
    result = parse({"entities": [entity("  Ada \n  Lovelace\t", " Person ", "  Wrote\n\nnotes.  ")],
                    "relations": [relation(" Ada  Lovelace ", "Charles\u00a0 Babbage",
                                           keywords=["  worked   with "], description="a\tb")]})
    assert result.entities[0] == ExtractedEntity("Ada Lovelace", "Person", "Wrote notes.")
    rel = result.relations[0]
    assert (rel.source, rel.target, rel.keywords, rel.description) == (
        "Ada Lovelace", "Charles Babbage", ("worked with",), "a b")


def test_control_characters_removed():
    assert parse({"entities": [entity("Al\x00ice\x07")]}).entities[0].name == "Alice"


def test_caps():
    words = " ".join(f"word{i}" for i in range(1000))
    result = parse({"entities": [entity("N" * 500, "T" * 100, words)],
                    "relations": [relation("N" * 500, "B", description=words,
                                           keywords=["k" * 100] + [f"kw{i}" for i in range(30)])]})
    ent = result.entities[0]
    assert len(ent.name) == 120
    assert ent.type == "Other"
    assert len(ent.description) <= 2000
    assert words.startswith(ent.description) and not ent.description.endswith(" ")
    assert words[len(ent.description)] == " "  # cut at a word boundary
    rel = result.relations[0]
    assert rel.source == ent.name
    assert len(rel.description) <= 2000
    assert len(rel.keywords) == 12
    assert rel.keywords[0] == "k" * 60
    assert all(len(k) <= 60 for k in rel.keywords)


def test_long_name_cut_at_word_boundary():
    name = " ".join(["Grand"] * 40)
    cut = normalise_name(name)
    assert len(cut) <= 120 and name.startswith(cut) and cut.endswith("Grand")


@pytest.mark.parametrize("raw, expected", [
    ("Person", "Person"), ("person", "Person"), ("ORGANIZATION", "Organization"),
    ("natural object", "NaturalObject"), ("natural_object", "NaturalObject"),
    ("Natural Object", "NaturalObject"), ("naturalobject", "NaturalObject"),
    ("  location ", "Location"), ("**Event**", "Event"),
    ("Animal", "Other"), ("", "Other"), ("other", "Other"), ("Person, Location", "Other"),
])
def test_type_mapping(raw, expected):
    assert parse({"entities": [entity("X", raw)]}).entities[0].type == expected


def test_type_mapping_uses_given_types():
    result = parse_extraction(json.dumps({"entities": [entity("X", "gene"), entity("Y", "Person")]}),
                              entity_types=["Gene"])
    assert [e.type for e in result.entities] == ["Gene", "Other"]


def test_canonical_spelling_across_entities_and_relations():
    result = parse({
        "entities": [entity("OpenAI", "Organization", "Lab."),
                     entity("openai", "Organization", "An AI lab.")],
        "relations": [relation("OPENAI", "sam altman"), relation("Microsoft", "Sam Altman"),
                      relation("microsoft", "OpenAI", description="partner")],
    })
    assert result.entities == (ExtractedEntity("OpenAI", "Organization", "An AI lab."),)
    pairs = [(r.source, r.target) for r in result.relations]
    assert pairs == [("OpenAI", "sam altman"), ("Microsoft", "sam altman"), ("Microsoft", "OpenAI")]


def test_relations_may_name_unknown_entities():
    result = parse({"entities": [entity("Alice")], "relations": [relation("Alice", "Wonderland")]})
    assert [e.name for e in result.entities] == ["Alice"]
    assert result.relations[0].target == "Wonderland"


def test_self_loops_dropped():
    result = parse({"relations": [relation("Alice", "alice"), relation("Bob", " BOB "),
                                  relation("Alice", "Bob")]})
    assert [(r.source, r.target) for r in result.relations] == [("Alice", "Bob")]


def test_dropped_self_loop_does_not_set_spelling():
    result = parse({"relations": [relation("ALICE", "alice"), relation("Alice", "Bob")]})
    assert result.relations[0].source == "Alice"


@pytest.mark.parametrize("raw, expected", [
    ("alliance, war; Treaty", ("alliance", "war", "Treaty")),
    ("a,, ;b", ("a", "b")),
    ("合作，贸易", ("合作", "贸易")),
    (["x", "X", " x ", "y", 3, None, ""], ("x", "y")),
    ("Trade, trade, TRADE", ("Trade",)),
    (None, ()), (42, ()), ({"a": "b"}, ()), ("", ()),
])
def test_keywords(raw, expected):
    assert parse({"relations": [relation("A", "B", keywords=raw)]}).relations[0].keywords == expected


def test_keywords_missing():
    rel = {"source": "A", "target": "B"}
    assert parse({"relations": [rel]}).relations[0].keywords == ()


@pytest.mark.parametrize("raw, expected", [
    (7, 7.0), (7.5, 7.5), ("8", 8.0), (" 2.5 ", 2.5), (11, 10.0), (1e308, 10.0),
    (0, 0.1), (-3, 0.1), ("high", 1.0), (None, 1.0), ([5], 1.0), (True, 1.0),
    ("nan", 1.0), ("inf", 10.0), ("-inf", 0.1),
    pytest.param(10**400, 10.0, id="huge-int"), pytest.param(-(10**400), 0.1, id="huge-negative-int"),
])
def test_weights(raw, expected):
    assert parse({"relations": [relation("A", "B", weight=raw)]}).relations[0].weight == expected


def test_weight_missing():
    assert parse({"relations": [{"source": "A", "target": "B"}]}).relations[0].weight == 1.0


def test_duplicate_entities_merged():
    result = parse({"entities": [
        entity("Alice", "Other", "A long description of Alice."),
        entity("ALICE", "Person", "Short."),
        entity("Bob", "Person", "Bob."),
        entity("bob", "Other", "Bob, longer description."),
    ]})
    assert result.entities == (
        ExtractedEntity("Alice", "Person", "A long description of Alice."),
        ExtractedEntity("Bob", "Person", "Bob, longer description."),
    )


def test_duplicate_relations_merged():
    result = parse({"relations": [
        relation("A", "B", keywords=["x", "y"], description="short", weight=3),
        relation("b", "a", keywords="Y, z", description="the longer one", weight=7),
        relation("A", "B", keywords=["w"], description="tiny", weight=2),
    ]})
    assert result.relations == (ExtractedRelation("B", "A", ("x", "y", "z", "w"), "the longer one", 7.0),)


@pytest.mark.parametrize("raw, expected", [
    ('"Alice"', "Alice"), ("'Alice'", "Alice"), ("**Alice**", "Alice"), ("*Alice*", "Alice"),
    ("`Alice`", "Alice"), ("[Alice]", "Alice"), ("(Alice)", "Alice"), ("<Alice>", "Alice"),
    ("\u201cAlice\u201d", "Alice"), ("\u300c\u6771\u4eac\u300d", "\u6771\u4eac"),
    ('** "Alice" **', "Alice"), ("  Ada   Lovelace ", "Ada Lovelace"),
    ("Queen (band)", "Queen (band)"), ("(a) and (b)", "(a) and (b)"), ('"a" and "b"', '"a" and "b"'),
    ("*a* and *b*", "*a* and *b*"), ("__init__", "__init__"), ("O'Brien", "O'Brien"),
    ("", ""), ('""', ""), ("**", "**"),
])
def test_normalise_name(raw, expected):
    assert normalise_name(raw) == expected


def test_name_key():
    assert name_key("  **Zürich** ") == name_key("ZÜRICH") == "zürich"
    assert name_key("Straße") == name_key("STRASSE")


def test_unicode_names():
    result = parse({"entities": [entity("Zürich", "Location", "Stadt."),
                                 entity("東京", "location", "首都。"),
                                 entity("ZÜRICH", "Location", "")],
                    "relations": [relation("zürich", "東京", keywords="姉妹都市")]})
    assert [e.name for e in result.entities] == ["Zürich", "東京"]
    assert result.relations[0].source == "Zürich"
    assert result.relations[0].keywords == ("姉妹都市",)
    assert ExtractionResult.from_json(result.to_json()) == result
    assert "東京" in result.to_json()


# --- merge_passes ------------------------------------------------------------------------


def test_merge_passes_entities():
    first = ExtractionResult((ExtractedEntity("Alice", "Person", "Short."),
                              ExtractedEntity("Acme", "Other", "A company making everything."),
                              ExtractedEntity("Bob", "Person", "Bob is a builder.")), ())
    second = ExtractionResult((ExtractedEntity("alice", "Other", "Alice, a longer description."),
                               ExtractedEntity("ACME", "Organization", "Firm."),
                               ExtractedEntity("Bob", "Other", "Bob."),
                               ExtractedEntity("Carol", "Person", "New.")), ())
    merged = merge_passes(first, second)
    assert merged.entities == (
        ExtractedEntity("Alice", "Person", "Alice, a longer description."),
        ExtractedEntity("Acme", "Organization", "A company making everything."),
        ExtractedEntity("Bob", "Person", "Bob is a builder."),
        ExtractedEntity("Carol", "Person", "New."),
    )


def test_merge_passes_kept_real_type_wins_over_other_type():
    first = ExtractionResult((ExtractedEntity("X", "Person", "short"),), ())
    second = ExtractionResult((ExtractedEntity("x", "Location", "much longer"),), ())
    assert merge_passes(first, second).entities == (ExtractedEntity("X", "Location", "much longer"),)


def test_merge_passes_relations():
    first = ExtractionResult((), (
        ExtractedRelation("Alice", "Bob", ("friends",), "Friends.", 6.0),
        ExtractedRelation("Alice", "Acme", ("works at",), "Alice works at Acme.", 9.0),
    ))
    second = ExtractionResult((), (ExtractedRelation("bob", "ALICE", ("Friends", "neighbours"),
                                                     "They are old friends.", 4.0),
                                   ExtractedRelation("Bob", "Carol", ("siblings",), "Siblings.", 5.0)))
    merged = merge_passes(first, second)
    assert merged.relations == (
        ExtractedRelation("Bob", "Alice", ("friends", "neighbours"), "They are old friends.", 6.0),
        ExtractedRelation("Alice", "Acme", ("works at",), "Alice works at Acme.", 9.0),
        ExtractedRelation("Bob", "Carol", ("siblings",), "Siblings.", 5.0),
    )


def test_merge_passes_spelling_from_first_pass():
    first = ExtractionResult((ExtractedEntity("OpenAI", "Organization", "Lab."),), ())
    second = ExtractionResult((), (ExtractedRelation("OPENAI", "Microsoft", ("partners",), "", 5.0),))
    merged = merge_passes(first, second)
    assert merged.relations[0].source == "OpenAI"


def test_merge_passes_with_empty():
    result = parse({"entities": [entity("A")], "relations": [relation("A", "B")]})
    assert merge_passes(result, ExtractionResult()) == result
    assert merge_passes(ExtractionResult(), result) == result
    assert merge_passes(ExtractionResult(), ExtractionResult()).is_empty()


# --- serialisation -----------------------------------------------------------------------


def test_json_round_trip():
    result = parse({"entities": [entity("Alice", "Person", 'She said "hi".\n'), entity("東京", "Location")],
                    "relations": [relation("Alice", "東京", keywords="visit, trip", weight="7.5",
                                           description="Visited.")]})
    raw = result.to_json()
    assert "\n" not in raw and ": " not in raw.replace('said "hi"', "")
    assert json.loads(raw)["relations"][0]["keywords"] == ["visit", "trip"]
    back = ExtractionResult.from_json(raw)
    assert back == result
    assert back.to_json() == raw
    assert ExtractionResult().to_json() == '{"entities":[],"relations":[]}'


def test_to_json_keeps_order():
    zed, amy = ExtractedEntity("Zed", "Person", ""), ExtractedEntity("Amy", "Person", "")
    result = ExtractionResult((zed, amy), ())
    assert [e["name"] for e in json.loads(result.to_json())["entities"]] == ["Zed", "Amy"]


@pytest.mark.parametrize("raw", ["", "[]", "{}", '{"entities": [], "relations": [{"source": "a"}]}'])
def test_from_json_rejects_garbage(raw):
    with pytest.raises(ExtractionFormatError):
        ExtractionResult.from_json(raw)


def test_is_empty():
    assert ExtractionResult().is_empty()
    assert not ExtractionResult((ExtractedEntity("A", "Other", ""),), ()).is_empty()
    assert not ExtractionResult((), (ExtractedRelation("A", "B", (), "", 1.0),)).is_empty()


# --- properties --------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=25,
)
name_like = st.text(max_size=150) | st.sampled_from(["Alice", "ALICE", "**alice**", " Bob ", "東京", ""])
entity_items = st.fixed_dictionaries(
    {}, optional={"name": name_like | json_values,
                  "type": st.sampled_from(["person", "natural object", "x"]) | json_values,
                  "description": st.text(max_size=50) | json_values})
relation_items = st.fixed_dictionaries(
    {}, optional={"source": name_like | json_values, "target": name_like | json_values,
                  "keywords": (st.text(max_size=40) | st.lists(st.text(max_size=70), max_size=15)
                               | json_values),
                  "description": st.text(max_size=50) | json_values,
                  "weight": st.floats() | st.integers() | st.text(max_size=8) | json_values})
replies = st.fixed_dictionaries(
    {}, optional={"entities": st.lists(entity_items | json_values, max_size=6) | json_values,
                  "relations": st.lists(relation_items | json_values, max_size=6) | json_values})


def assert_invariants(result: ExtractionResult) -> None:
    assert isinstance(result, ExtractionResult)
    allowed = set(TYPES) | {"Other"}
    keys = [name_key(e.name) for e in result.entities]
    assert len(keys) == len(set(keys))
    for ent in result.entities:
        assert 0 < len(ent.name) <= 120 and normalise_name(ent.name) == ent.name
        assert ent.type in allowed
        assert len(ent.description) <= 2000
    pairs = set()
    for rel in result.relations:
        for name in (rel.source, rel.target):
            assert 0 < len(name) <= 120 and normalise_name(name) == name
        assert name_key(rel.source) != name_key(rel.target)
        pair = frozenset((name_key(rel.source), name_key(rel.target)))
        assert pair not in pairs
        pairs.add(pair)
        assert 0.1 <= rel.weight <= 10 and math.isfinite(rel.weight)
        assert len(rel.keywords) <= 12 and all(0 < len(k) <= 60 for k in rel.keywords)
        assert len({k.casefold() for k in rel.keywords}) == len(rel.keywords)
        assert len(rel.description) <= 2000
    assert ExtractionResult.from_json(result.to_json()) == result


def check_content(content: str) -> None:
    try:
        result = parse_extraction(content, entity_types=TYPES)
    except ExtractionFormatError:
        return
    assert_invariants(result)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_property_arbitrary_json(value):
    check_content(json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(replies, st.sampled_from(["{}", "```json\n{}\n```", "Here: {} thanks", "{}\n```"]))
def test_property_reply_shaped_json(value, wrapper):
    check_content(wrapper.replace("{}", json.dumps(value, ensure_ascii=False), 1))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_property_arbitrary_text(text):
    check_content(text)


@settings(max_examples=200, deadline=None)
@given(replies, replies)
def test_property_merge_passes(a, b):
    try:
        first, second = parse(a), parse(b)
    except ExtractionFormatError:
        return
    assert_invariants(merge_passes(first, second))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_property_normalise_name_idempotent(text):
    once = normalise_name(text)
    assert normalise_name(once) == once
    assert len(once) <= 120
    assert name_key(once) == name_key(text)
