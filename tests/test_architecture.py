"""The layout's rules, read from the product's own source (docs/architecture.md states them):
only the store touches its engines, no module imports another in a circle, the surfaces (the /rag
API, the console, the CLI, the chat gateway, the MCP server) reach the knowledge base through the knowledge
service, and nothing reaches into another object's private parts."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("duckdb", "usearch", "igraph", "pyarrow", "bm25s")
SURFACES = ("proxy.rag_api", "proxy.gateway", "proxy.cli", "proxy.mcp_server", "admin")
# what sits behind the knowledge service: a surface importing one of these goes around it
BEHIND_THE_SERVICE = ("proxy.store.store", "proxy.store.duckdb", "proxy.store.backends", "proxy.store.graph_igraph",
                      "proxy.store.vectors_usearch", "proxy.store.rows_memory", "proxy.ingest", "proxy.merging")
# data an engine's package ships, read by the text layer: bm25s' maintained stopword lists
ENGINE_DATA = ("bm25s.stopwords",)
# third-party internals read on purpose: python-docx has no public access to a table cell's XML
FOREIGN_PRIVATES = {("proxy.parsing.files", "_tc")}


@dataclass(frozen=True)
class Import:
    module: str      # the importing module
    target: str      # what it names: a module, or module.name
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


def product_modules() -> dict[str, Path]:
    modules = {}
    for package in ("proxy", "admin"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno, id(node) in type_only)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{module}:{node.lineno}: relative import"
            yield Import(module, node.module, node.lineno, id(node) in type_only)
            for alias in node.names:
                yield Import(module, f"{node.module}.{alias.name}", node.lineno, id(node) in type_only)


def all_imports() -> list[Import]:
    return [found for module, path in product_modules().items() for found in imports_of(module, path)]


def test_only_the_store_imports_its_engines() -> None:
    offenders = [f"{i.module}:{i.line} imports {i.target}" for i in all_imports()
                 if i.target.split(".")[0] in ENGINES and not i.module.startswith("proxy.store")
                 and not i.target.startswith(ENGINE_DATA)]
    assert not offenders, offenders


def test_sql_is_written_only_in_the_store() -> None:
    offenders = []
    for module, path in product_modules().items():
        if module.startswith("proxy.store"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "execute", "executemany", "sql", "fetchall", "fetchone", "fetchnumpy"):
                offenders.append(f"{module}:{node.lineno} {ast.unparse(node)[:60]}")
    assert not offenders, offenders


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_another_in_a_circle_not_even_for_types() -> None:
    modules = product_modules()
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for found in all_imports():
        if found.target in modules and found.target != found.module:
            edges[found.module].add(found.target)
    assert cycles(edges) == []


def folder_of(module: str) -> str:
    """``proxy.store.duckdb.tables`` -> ``proxy.store``; a module directly in ``proxy`` is its own."""
    parts = module.split(".")
    if parts[0] == "admin":
        return "admin"
    return ".".join(parts[:2]) if (ROOT / "proxy" / parts[1]).is_dir() else module


def test_the_folders_are_layers_none_imports_one_that_imports_it_back() -> None:
    modules = product_modules()
    edges: dict[str, set[str]] = {}
    for found in all_imports():
        if found.target in modules and folder_of(found.target) != folder_of(found.module):
            edges.setdefault(folder_of(found.module), set()).add(folder_of(found.target))
    assert cycles(edges) == []


def test_the_surfaces_reach_the_knowledge_base_through_the_service() -> None:
    offenders = [f"{i.module}:{i.line} imports {i.target}" for i in all_imports()
                 if i.module.startswith(SURFACES) and i.target.startswith(BEHIND_THE_SERVICE)]
    assert not offenders, offenders


def test_nothing_reaches_into_another_objects_private_parts() -> None:
    """``other._name`` (but ``self._name``, ``cls._name`` and dunders): a private attribute or
    method of another object; inside the store its modules share their engines' internals."""
    offenders = []
    for module, path in product_modules().items():
        if module.startswith("proxy.store"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and (module, node.attr) not in FOREIGN_PRIVATES):
                offenders.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    assert not offenders, offenders
