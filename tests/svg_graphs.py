"""Small graphs for the neighbourhood SVG: a star around one hub, and the link each node gets.

A module of its own so that a subprocess with another hash seed can build the same graph."""

from __future__ import annotations

from urllib.parse import quote

from admin.graph_svg import Edge, Node


def link(key: str) -> str:
    return "/admin/entities/" + quote(key, safe="")


def star(count: int, type_: str = "person") -> tuple[list[Node], list[Edge]]:
    nodes = [Node("hub", "Hub", "organization", count - 1)]
    nodes += [Node(f"n{i}", f"Node {i}", type_, 1) for i in range(1, count)]
    return nodes, [Edge("hub", f"n{i}", float(i), f"rel {i}") for i in range(1, count)]
