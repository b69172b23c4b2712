"""The server-side neighbourhood SVG: well-formed, safe with hostile names, deterministic."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from admin.graph_svg import (
    DEFAULT_TYPES,
    PALETTE,
    Edge,
    Node,
    legend,
    render_svg,
    type_colour,
)
from proxy.extraction.results import DEFAULT_ENTITY_TYPES
from tests.svg_graphs import link, star

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = ["<script>alert(1)</script>", '"onmouseover="x', "a & b", "Zoë ☃ 東京", "x\x00\x1by"]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def found(element: ET.Element, path: str) -> ET.Element:
    """The first match of ``path``; a missing one fails the test, naming it."""
    match = element.find(path)
    if match is None:
        raise AssertionError(f"no {path} in <{element.tag}>")
    return match


def attr(element: ET.Element, name: str) -> str:
    """An attribute that must be there; a missing one fails the test, naming it."""
    value = element.get(name)
    if value is None:
        raise AssertionError(f"<{element.tag}> has no {name}")
    return value


def text_of(element: ET.Element) -> str:
    if element.text is None:
        raise AssertionError(f"<{element.tag}> has no text")
    return element.text


def node_groups(root: ET.Element) -> dict[str, ET.Element]:
    groups = [g for g in root.iter(f"{SVG}g") if "node" in g.get("class", "").split()]
    keys = [attr(g, "data-key") for g in groups]
    assert len(keys) == len(set(keys)), "data-key must be unique"
    return dict(zip(keys, groups, strict=True))


def view_box(root: ET.Element) -> tuple[float, float]:
    x, y, width, height = map(float, attr(root, "viewBox").split())
    assert (x, y) == (0, 0)
    return width, height


def test_root_element_is_a_responsive_accessible_svg() -> None:
    nodes, edges = star(4)
    root = parse(render_svg(nodes, edges, "hub", link=link, width=600, height=400))
    assert root.tag == f"{SVG}svg"
    assert root.get("viewBox") == "0 0 600 400"
    assert root.get("width") == "100%"
    assert root.get("role") == "img"
    assert root.get("class") == "graph"
    assert root.get("aria-label") == "Neighbourhood of Hub"


def test_one_linked_group_per_node_and_a_line_per_edge() -> None:
    nodes, edges = star(6)
    root = parse(render_svg(nodes, edges, "hub", link=link))
    groups = node_groups(root)
    assert set(groups) == {n.key for n in nodes}
    for key, group in groups.items():
        anchor = found(group, f"{SVG}a")
        assert anchor.get("href") == link(key)
        assert anchor.find(f"{SVG}circle") is not None
        assert anchor.find(f"{SVG}text") is not None
    assert len(root.findall(f".//{SVG}line")) == len(edges)
    assert [t.text for t in root.iter(f"{SVG}line") for t in t.iter(f"{SVG}title")] == [
        f"rel {i}" for i in range(1, 6)
    ]


def test_centre_is_highlighted_and_only_the_centre() -> None:
    nodes, edges = star(5)
    groups = node_groups(parse(render_svg(nodes, edges, "n3", link=link)))
    centres = [k for k, g in groups.items() if "centre" in attr(g, "class").split()]
    assert centres == ["n3"]
    widths = {k: float(attr(found(g, f".//{SVG}circle"), "stroke-width")) for k, g in groups.items()}
    assert widths["n3"] > max(w for k, w in widths.items() if k != "n3")


def test_hostile_text_is_escaped_everywhere() -> None:
    nodes = [Node(f"k{i}{h}", h, h, 2) for i, h in enumerate(HOSTILE)]
    edges = [Edge(nodes[i].key, nodes[i + 1].key, 1.0, h) for i, h in enumerate(HOSTILE[:-1])]
    svg = render_svg(nodes, edges, nodes[0].key, link=lambda key: f"/e?k={key}")
    assert "<script" not in svg and '"onmouseover' not in svg
    root = parse(svg)  # raises if any quote, ampersand or control character broke the XML
    for element in root.iter():
        assert element.tag.split("}")[-1] not in {"script", "foreignObject"}
        assert not [a for a in element.attrib if a.lower().startswith("on")]
    groups = node_groups(root)
    assert set(groups) == {n.key.replace("\x00", "").replace("\x1b", "") for n in nodes}
    labels = [found(g, f".//{SVG}text").text for g in groups.values()]
    assert labels == [
        "<script>alert(1)</scrip…", '"onmouseover="x', "a & b", "Zoë ☃ 東京", "xy"
    ]
    tooltip = found(groups[nodes[0].key], f".//{SVG}title").text
    assert tooltip == "<script>alert(1)</script>\n<script>alert(1)</script> · degree 2"
    assert [t.text for line in root.iter(f"{SVG}line") for t in line] == HOSTILE[:-1]
    hrefs = [found(g, f"{SVG}a").get("href") for g in groups.values()]
    assert '/e?k=k1"onmouseover="x' in hrefs


def test_long_names_are_truncated_but_the_tooltip_keeps_them() -> None:
    name = "A very long entity name that goes on and on"
    root = parse(render_svg([Node("k", name, "thing", 7)], [], "k", link=link))
    group = node_groups(root)["k"]
    label = text_of(found(group, f".//{SVG}text"))
    assert len(label) == 24 and label.endswith("…") and name.startswith(label[:-1])
    assert found(group, f".//{SVG}title").text == f"{name}\nthing · degree 7"


def test_same_input_gives_identical_output() -> None:
    nodes, edges = star(30)
    edges += [Edge(f"n{i}", f"n{i + 1}", 0.5) for i in range(1, 29)]
    random.seed(1)
    first = render_svg(nodes, edges, "hub", link=link)
    random.seed(2)  # igraph draws from Python's global random; the layout must not
    assert render_svg(list(nodes), list(edges), "hub", link=link) == first


def test_output_and_colours_do_not_depend_on_the_process_hash_seed() -> None:
    script = (
        "from admin.graph_svg import render_svg, type_colour\n"
        "from tests.svg_graphs import link, star\n"
        "nodes, edges = star(12)\n"
        "print(type_colour('Person'), render_svg(nodes, edges, 'hub', link=link))\n"
    )
    root = Path(__file__).resolve().parents[1]
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    nodes, edges = star(12)
    expected = f"{type_colour('Person')} {render_svg(nodes, edges, 'hub', link=link)}\n"
    assert outputs.pop() == expected


def test_colours_are_stable_per_type_and_spread_over_the_palette() -> None:
    assert type_colour("person") == type_colour("Person") == type_colour("PERSON")
    assert type_colour("person") in PALETTE
    assert DEFAULT_TYPES == DEFAULT_ENTITY_TYPES
    assert len({type_colour(t) for t in DEFAULT_TYPES[: len(PALETTE)]}) == len(PALETTE)
    custom = [type_colour(f"custom type {i}") for i in range(40)]  # not defaults: hashed
    assert set(custom) <= set(PALETTE) and len(set(custom)) >= 8
    nodes = [Node("a", "A", "Person", 1), Node("b", "B", "person", 1), Node("c", "C", "event", 1)]
    groups = node_groups(parse(render_svg(nodes, [], "a", link=link)))
    fills = {k: found(g, f".//{SVG}circle").get("fill") for k, g in groups.items()}
    assert fills["a"] == fills["b"] == type_colour("person")
    assert fills["c"] == type_colour("event")


def test_legend_lists_each_type_once_with_its_colour() -> None:
    entries = legend(["person", "Event", "PERSON", "<b>"])
    assert entries == [
        ("<b>", type_colour("<b>")),
        ("Event", type_colour("event")),
        ("person", type_colour("person")),
    ]


def test_edges_to_unknown_nodes_and_self_loops_are_ignored() -> None:
    nodes = [Node("a", "A", "t", 2), Node("b", "B", "t", 1)]
    edges = [Edge("a", "b", 1.0), Edge("a", "ghost", 3.0), Edge("ghost", "b", 1.0)]
    edges.append(Edge("a", "a", 1.0))
    root = parse(render_svg(nodes, edges, "a", link=link))
    assert len(root.findall(f".//{SVG}line")) == 1
    assert set(node_groups(root)) == {"a", "b"}


def test_stroke_width_grows_with_weight_and_survives_odd_weights() -> None:
    nodes = [Node(k, k, "t", 1) for k in "abcdef"]
    weights = [0.5, 1.0, 10.0, 1e9, float("nan"), -3.0]
    edges = [Edge("a", k, w) for k, w in zip("bcdef", weights, strict=False)] + [Edge("b", "c", weights[-1])]
    root = parse(render_svg(nodes, edges, "a", link=link))
    widths = [float(attr(line, "stroke-width")) for line in root.iter(f"{SVG}line")]
    assert widths[0] < widths[1] < widths[2] <= widths[3] <= 6.0
    assert widths[4] == widths[5] == 1.0


def test_duplicate_node_keys_are_drawn_once() -> None:
    nodes = [Node("a", "A", "t", 1), Node("a", "A again", "t", 1), Node("b", "B", "t", 1)]
    root = parse(render_svg(nodes, [Edge("a", "b", 1.0)], "a", link=link))
    assert set(node_groups(root)) == {"a", "b"}
    assert len(root.findall(f".//{SVG}circle")) == 2


def test_no_nodes_says_no_neighbours() -> None:
    root = parse(render_svg([], [Edge("a", "b", 1.0)], "a", link=link))
    assert root.tag == f"{SVG}svg" and root.get("viewBox") == "0 0 720 480"
    assert "No neighbours" in [t.text for t in root.iter(f"{SVG}text")]
    assert root.findall(f".//{SVG}circle") == [] and root.findall(f".//{SVG}line") == []


def test_single_node_sits_in_the_middle() -> None:
    root = parse(render_svg([Node("a", "A", "t", 0)], [], "a", link=link, width=300, height=200))
    circle = found(node_groups(root)["a"], f".//{SVG}circle")
    assert (float(attr(circle, "cx")), float(attr(circle, "cy"))) == (150.0, 100.0)
    assert "centre" in attr(node_groups(root)["a"], "class")


def test_all_coordinates_are_inside_the_view_box() -> None:
    nodes, edges = star(25)
    nodes.append(Node("loner", "Loner", "t", 0))  # a disconnected node drifts away in the layout
    for width, height in [(720, 480), (320, 640), (200, 160)]:
        root = parse(render_svg(nodes, edges, "hub", link=link, width=width, height=height))
        assert view_box(root) == (width, height)
        for circle in root.iter(f"{SVG}circle"):
            x, y, r = (float(attr(circle, a)) for a in ("cx", "cy", "r"))
            assert 0 <= x - r and x + r <= width and 0 <= y - r and y + r <= height
        for line in root.iter(f"{SVG}line"):
            assert all(0 <= float(attr(line, a)) <= width for a in ("x1", "x2"))
            assert all(0 <= float(attr(line, a)) <= height for a in ("y1", "y2"))
        for text in root.iter(f"{SVG}text"):
            assert 0 <= float(attr(text, "x")) <= width and 0 <= float(attr(text, "y")) <= height


def test_two_hundred_nodes_render_completely() -> None:
    nodes, edges = star(200)
    edges += [Edge(f"n{i}", f"n{i * 7 % 199 + 1}", 1.0) for i in range(1, 200)]
    svg = render_svg(nodes, edges, "hub", link=link)
    root = parse(svg)
    assert set(node_groups(root)) == {n.key for n in nodes}
    assert len(svg) < 200_000
