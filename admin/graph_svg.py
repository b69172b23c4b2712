"""An entity's neighbourhood drawn as a self-contained SVG string, laid out on the server.

The console shows graphs without JavaScript or a CDN: the graph engine computes a force-directed
layout (``force_layout``: Kamada-Kawai from a circle, so the same neighbourhood always gives the
same SVG) and we emit plain SVG (circles, lines, links). Rendering is CPU work: routes run it in a
worker thread. Names, types and relation labels come from LLM extraction of user documents, so
every one of them is treated as hostile text.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable
from html import escape

from proxy.knowledge.graph import Edge, Node, force_layout

# Tableau 10: distinguishable on a white page and for the common colour-vision deficiencies.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)
# Hashing alone put Person and Organization on one colour (ten types share ten colours badly),
# so the default types get distinct colours by position; other types fall back to the hash.
# A copy of proxy.extraction.results.DEFAULT_ENTITY_TYPES, so the colours stay put if that list
# grows; tests/test_graph_svg.py keeps the two equal.
DEFAULT_TYPES = (
    "Person", "Creature", "Organization", "Location", "Event", "Concept",
    "Method", "Content", "Data", "Artifact", "NaturalObject",
)
_FIXED_COLOURS = dict(zip((t.casefold() for t in DEFAULT_TYPES), PALETTE, strict=False))
LABEL_CHARS = 24
MAX_RADIUS = 18.0
MAX_STROKE = 6.0
# Labels are drawn at this size in user units, and the page never shows the drawing smaller than
# its viewBox (the root's min-width: a narrow screen scrolls it inside its frame instead), so a
# label is never smaller than FONT_SIZE pixels on screen.
FONT_SIZE = 13
# Characters XML 1.0 forbids even when escaped (controls, lone surrogates, U+FFFE/U+FFFF):
# one of them in a name would make the whole document unparseable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def type_colour(type: str) -> str:
    """The palette colour for an entity type; stable across requests, processes and restarts."""
    if type.casefold() in _FIXED_COLOURS:
        return _FIXED_COLOURS[type.casefold()]
    # hashlib rather than hash(): str hashes are salted per process (PYTHONHASHSEED).
    digest = hashlib.sha256(type.casefold().encode("utf-8", "surrogatepass")).digest()
    return PALETTE[int.from_bytes(digest[:4], "big") % len(PALETTE)]


def legend(types: Iterable[str]) -> list[tuple[str, str]]:
    """(type, colour) once per case-folded type, sorted, for a legend next to the graph."""
    first_spelling: dict[str, str] = {}
    for t in types:
        first_spelling.setdefault(t.casefold(), t)
    return [(first_spelling[k], type_colour(k)) for k in sorted(first_spelling)]


def render_svg(
    nodes: list[Node],
    edges: list[Edge],
    centre: str,
    *,
    link: Callable[[str], str],
    width: int = 720,
    height: int = 480,
) -> str:
    """The neighbourhood as an <svg> element; ``link(key)`` gives each node's href."""
    nodes = _unique_nodes(nodes)
    if not nodes:
        return _svg(width, height, "No neighbours", [_centred_text(width, height, "No neighbours")])
    index = {node.key: i for i, node in enumerate(nodes)}
    edges = [e for e in edges if e.source in index and e.target in index and e.source != e.target]
    pairs = [(index[e.source], index[e.target]) for e in edges]
    points = _fit(force_layout(len(nodes), pairs), width, height)
    centre_node = nodes[index[centre]] if centre in index else None
    title = f"Neighbourhood of {centre_node.name}" if centre_node else "Entity neighbourhood"
    body = ['<g class="edges" stroke="#8a8a8a" stroke-opacity="0.7">']
    body += [_edge(e, nodes[i], nodes[j], points[i], points[j]) for e, (i, j) in zip(edges, pairs, strict=True)]
    body.append(f'</g><g class="nodes" font-family="sans-serif" font-size="{FONT_SIZE}">')
    body += [_node(n, p, n.key == centre, link) for n, p in zip(nodes, points, strict=True)]
    body.append("</g>")
    return _svg(width, height, title, body)


def _unique_nodes(nodes: list[Node]) -> list[Node]:
    # A repeated key would mean two circles for one entity and a duplicate data-key.
    seen: dict[str, Node] = {}
    for node in nodes:
        seen.setdefault(node.key, node)
    return list(seen.values())


def _fit(points: list[tuple[float, float]], width: int, height: int) -> list[tuple[float, float]]:
    """Scale layout coordinates into the viewBox, leaving room for circles and labels."""
    # Labels hang below circles and are centred on them, so they need more room sideways.
    margin_x = min(80.0, width / 4)
    margin_y = min(40.0, height / 4)
    xs = _scale([p[0] for p in points], margin_x, width - margin_x)
    ys = _scale([p[1] for p in points], margin_y, height - margin_y)
    return list(zip(xs, ys, strict=True))


def _scale(values: list[float], low: float, high: float) -> list[float]:
    smallest, largest = min(values), max(values)
    if largest - smallest < 1e-9:  # one node, or all on a line: put them midway
        return [(low + high) / 2] * len(values)
    factor = (high - low) / (largest - smallest)
    return [low + (v - smallest) * factor for v in values]


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%"'
        f' style="min-width: {width}px" role="img" aria-label="{_text(title)}" class="graph">'
        f"<title>{_text(title)}</title>{''.join(body)}</svg>"
    )


def _centred_text(width: int, height: int, message: str) -> str:
    return (
        f'<text x="{width / 2:.1f}" y="{height / 2:.1f}" text-anchor="middle"'
        f' font-family="sans-serif" font-size="{FONT_SIZE + 3}" fill="#666">{_text(message)}</text>'
    )


def _edge(edge: Edge, a: Node, b: Node, p: tuple[float, float], q: tuple[float, float]) -> str:
    tooltip = edge.label or f"{a.name} – {b.name}"
    return (
        f'<line x1="{p[0]:.1f}" y1="{p[1]:.1f}" x2="{q[0]:.1f}" y2="{q[1]:.1f}"'
        f' stroke-width="{_stroke_width(edge.weight):.2f}"><title>{_text(tooltip)}</title></line>'
    )


def _node(node: Node, p: tuple[float, float], is_centre: bool, link: Callable[[str], str]) -> str:
    r = _radius(node.degree)
    classes = "node centre" if is_centre else "node"
    stroke = 'stroke="#222" stroke-width="4"' if is_centre else 'stroke="#fff" stroke-width="1.5"'
    tooltip = f"{node.name}\n{node.type} · degree {node.degree}"
    return (
        f'<g class="{classes}" data-key="{_text(node.key)}"><a href="{_text(link(node.key))}">'
        f"<title>{_text(tooltip)}</title>"
        f'<circle cx="{p[0]:.1f}" cy="{p[1]:.1f}" r="{r:.1f}" fill="{type_colour(node.type)}"'
        f" {stroke}/>"
        f'<text x="{p[0]:.1f}" y="{p[1] + r + FONT_SIZE + 2:.1f}" text-anchor="middle"'
        f' fill="#222">{_text(_truncate(node.name))}</text></a></g>'
    )


def _radius(degree: int) -> float:
    # sqrt so hubs stand out without swallowing their neighbours; capped for the same reason.
    return min(MAX_RADIUS, 6 + 2 * math.sqrt(max(0, degree)))


def _stroke_width(weight: float) -> float:
    if not weight > 0:  # also catches NaN, which would otherwise print as stroke-width="nan"
        return 1.0
    return min(MAX_STROKE, 1 + math.log1p(weight))


def _truncate(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def _text(value: str) -> str:
    """Untrusted text made safe for both element content and double-quoted attributes."""
    return escape(_NOT_XML.sub("", value), quote=True)
