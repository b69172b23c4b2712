"""The layout's rules, read from the product's own source (docs/architecture.md states them).

Each rule is a function of the house (every module of ``proxy/`` and ``admin/`` with its source)
that returns its offenders. Each is run twice: on the house as it is, where it must find nothing,
and on the house with one violation planted (a module that is not on disk), where it must name
the planted module: a rule that cannot fail checks nothing."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("duckdb", "usearch", "igraph", "pyarrow", "bm25s")
SURFACES = ("proxy.rag_api", "proxy.gateway", "proxy.cli", "proxy.mcp_server", "admin")
# the surfaces that serve requests side by side: none imports another (what two share lives below them)
SIDE_BY_SIDE = ("proxy.rag_api", "proxy.mcp_server", "admin")
# what sits behind the knowledge service: a surface importing one of these goes around it
BEHIND_THE_SERVICE = ("proxy.store.store", "proxy.store.duckdb", "proxy.store.backends", "proxy.store.graph_igraph",
                      "proxy.store.vectors_usearch", "proxy.store.rows_memory", "proxy.ingest", "proxy.merging")
# data an engine's package ships, read by the text layer: bm25s' maintained stopword lists
ENGINE_DATA = ("bm25s.stopwords",)
# third-party internals read on purpose: python-docx has no public access to a table cell's XML
FOREIGN_PRIVATES = {("proxy.parsing.files", "_tc")}
# the writes of a control-plane list: only its one holder makes them (and the lists' own backends)
LIST_WRITES = ("update_sync", "write_sync")
LIST_WRITERS = ("proxy.control.held", "proxy.control.lists", "proxy.store")


@dataclass(frozen=True)
class Import:
    module: str      # the importing module
    target: str      # what it names: a module, or module.name
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


@dataclass(frozen=True)
class House:
    sources: dict[str, str]   # module -> its source text

    @classmethod
    def on_disk(cls) -> House:
        sources = {}
        for package in ("proxy", "admin"):
            for path in (ROOT / package).rglob("*.py"):
                parts = path.relative_to(ROOT).with_suffix("").parts
                sources[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path.read_text()
        return cls(sources)

    def planted(self, **modules: str) -> House:
        """The house with more modules, named ``proxy__folder__name`` (a keyword cannot hold dots)."""
        return House({**self.sources, **{name.replace("__", "."): source for name, source in modules.items()}})

    @cached_property
    def trees(self) -> dict[str, ast.Module]:
        return {module: parsed(module, source) for module, source in self.sources.items()}

    @cached_property
    def imports(self) -> list[Import]:
        return [found for module in self.sources for found in imports_of(module, self.trees[module])]


@cache
def parsed(module: str, source: str) -> ast.Module:
    return ast.parse(source, module)   # once per text: a planted house parses only what was planted


def imports_of(module: str, tree: ast.Module) -> Iterator[Import]:
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


def within(name: str, packages: str | tuple[str, ...]) -> bool:
    """Whether module (or imported name) ``name`` is one of ``packages`` or inside one."""
    return any(name == p or name.startswith(p + ".") for p in ((packages,) if isinstance(packages, str) else packages))


def folder_of(module: str) -> str:
    """``proxy.store.duckdb.tables`` -> ``proxy.store``; a module directly in ``proxy`` is its own."""
    parts = module.split(".")
    if parts[0] == "admin":
        return "admin"
    return ".".join(parts[:2]) if len(parts) > 2 or (ROOT / "proxy" / parts[1]).is_dir() else module


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


def imports_outside(house: House, packages: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    """Offenders: a module of ``packages`` importing a GraphGate module outside ``allowed``."""
    return [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
            if within(i.module, packages) and within(i.target, ("proxy", "admin")) and not within(i.target, allowed)]


# --- the rules ---

def only_the_store_imports_its_engines(house: House) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
            if i.target.split(".")[0] in ENGINES and not within(i.module, "proxy.store")
            and not i.target.startswith(ENGINE_DATA)]


def sql_is_written_only_in_the_store(house: House) -> list[str]:
    offenders = []
    for module, tree in house.trees.items():
        if within(module, "proxy.store"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "execute", "executemany", "sql", "fetchall", "fetchone", "fetchnumpy"):
                offenders.append(f"{module}:{node.lineno} {ast.unparse(node)[:60]}")
    return offenders


def no_module_imports_another_in_a_circle(house: House) -> list[str]:
    """Not even for types."""
    edges: dict[str, set[str]] = {module: set() for module in house.sources}
    for found in house.imports:
        if found.target in house.sources and found.target != found.module:
            edges[found.module].add(found.target)
    return [" <-> ".join(group) for group in cycles(edges)]


def the_folders_are_layers(house: House) -> list[str]:
    """No folder imports one that imports it back."""
    edges: dict[str, set[str]] = defaultdict(set)
    for found in house.imports:
        if found.target in house.sources and folder_of(found.target) != folder_of(found.module):
            edges[folder_of(found.module)].add(folder_of(found.target))
    return [" <-> ".join(group) for group in cycles(edges)]


def the_surfaces_reach_the_knowledge_base_through_the_service(house: House) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
            if within(i.module, SURFACES) and within(i.target, BEHIND_THE_SERVICE)]


def nothing_reaches_into_another_objects_private_parts(house: House) -> list[str]:
    """``other._name`` (but ``self._name``, ``cls._name`` and dunders): a private attribute or
    method of another object; inside the store its modules share their engines' internals."""
    offenders = []
    for module, tree in house.trees.items():
        if within(module, "proxy.store"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and (module, node.attr) not in FOREIGN_PRIVATES):
                offenders.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return offenders


def the_control_plane_imports_only_the_kernel(house: House) -> list[str]:
    """The run-time lists (bases, keys, models, sessions, pending answers) stand on proxy/core/ alone:
    the guards and the gateway read them without reaching the knowledge store."""
    return imports_outside(house, ("proxy.control",), ("proxy.control", "proxy.core"))


def the_guards_and_the_upstream_never_import_the_store(house: House) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
            if within(i.module, ("proxy.guards", "proxy.upstream")) and within(i.target, "proxy.store")]


def monitoring_imports_only_the_kernel(house: House) -> list[str]:
    """What it reads of the knowledge service and of a trace it names as protocols; the /metrics
    route is handed its gate by the app."""
    return imports_outside(house, ("proxy.monitoring",), ("proxy.monitoring", "proxy.core"))


def the_surfaces_side_by_side_import_none_of_each_other(house: House) -> list[str]:
    """The /rag API, the MCP server and the console: what two of them share lives below them
    (proxy/actions/, proxy/state.py, the knowledge service)."""
    return [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
            for surface in SIDE_BY_SIDE
            if within(i.module, surface) and within(i.target, SIDE_BY_SIDE) and not within(i.target, surface)]


def one_holder_writes_the_control_planes_lists(house: House) -> list[str]:
    """``HeldList`` (proxy/control/held.py) is the one read-change-write of a list; its holders
    (keys, models, bases, sessions) keep only their rules."""
    offenders = []
    for module, tree in house.trees.items():
        if within(module, LIST_WRITERS):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in LIST_WRITES:
                offenders.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return offenders


def no_class_name_is_used_twice(house: House) -> list[str]:
    """A class name names one thing: two classes of one name make every reader check the import."""
    where: dict[str, list[str]] = defaultdict(list)
    for module, tree in house.trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(module)
    return [f"{name}: {', '.join(sorted(modules))}" for name, modules in where.items() if len(modules) > 1]


# what retrieval may name of the store: its narrow face and the plain records it hands over
RETRIEVAL_SEES_OF_THE_STORE = ("proxy.store.protocols", "proxy.store.changes", "proxy.store.incident",
                               "proxy.store.memory_reads", "proxy.store.rows_memory")


def retrieval_reads_the_store_through_its_narrow_face(house: House) -> list[str]:
    """``RetrievalReads`` (proxy/store/protocols/retrieval.py): no import of the store's class or its
    engines' modules, no callback into its in-memory rows, no reach into its tables."""
    offenders = [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
                 if within(i.module, "proxy.retrieval") and within(i.target, "proxy.store")
                 and not within(i.target, RETRIEVAL_SEES_OF_THE_STORE)]
    for module, tree in house.trees.items():
        if not within(module, "proxy.retrieval"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("read_memory", "read_memory_sync", "tables"):
                offenders.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return offenders


def nothing_outside_the_store_hands_it_a_callback_into_its_memory(house: House) -> list[str]:
    """The in-memory rows and graph are read by name (``memory_reads.py``, ``entity_page_reads.py``):
    no ``read_memory(lambda rows, graph: ...)`` outside proxy/store/."""
    return [f"{module}:{node.lineno} {ast.unparse(node)}" for module, tree in house.trees.items()
            if not within(module, "proxy.store") for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("read_memory", "read_memory_sync")]


# the folders whose components are handed a section of the settings (proxy/core/settings_sections.py)
SECTIONED = ("proxy.parsing", "proxy.extraction", "proxy.merging", "proxy.ingest", "proxy.upstream", "proxy.guards",
             "proxy.retrieval", "proxy.gateway", "proxy.store", "proxy.control", "proxy.rag_api", "proxy.actions",
             "proxy.mcp_server.http", "admin", "proxy.knowledge.intake", "proxy.knowledge.communities",
             "proxy.knowledge.embedding_guard")
# the request handlers above ``proxy/state.py``, which hands each its section
HANDLERS = ("proxy.rag_api", "proxy.actions", "proxy.mcp_server", "admin")
# the console's pages that show every setting (the settings page, the dashboard, a base's overrides)
SHOW_EVERY_SETTING = ("admin.routes_settings", "admin.routes_dashboard", "admin.routes_kbs")


def sectioned_components_never_take_the_whole_settings(house: House) -> list[str]:
    """Each reads the section it needs (the type checker holds it to it), never all 90 settings:
    it does not import ``Settings``, and a request handler reads its section through
    ``proxy/state.py`` (``access_settings(request)``...), not ``request.app.state.gateway.settings``."""
    found = [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
             if within(i.module, SECTIONED) and i.target == "proxy.core.settings.Settings"]
    for module, tree in house.trees.items():
        if within(module, HANDLERS) and module not in SHOW_EVERY_SETTING:
            found += [f"{module}:{node.lineno} reads {ast.unparse(node)}" for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr == "settings"
                      and ast.unparse(node.value).endswith(("state.gateway", "gateway_of(request)"))]
    return found


BACKENDS = ("proxy.store.duckdb", "proxy.store.postgres")
FORWARDS = ("return await self.db.read", "await self.db.write", "return await self.db.write",
            "return self.db.read_sync")


def a_backend_holds_statements_and_the_adapter_is_one(house: House) -> list[str]:
    """A subject's adapter is written once over the backends' statements (``proxy/store/sql_*.py``):
    a backend's class does not forward a statement itself (but its tables core, ``tables.py``,
    which each backend opens in its own way)."""
    offenders = []
    for module, tree in house.trees.items():
        if not within(module, BACKENDS) or module.endswith(".tables"):
            continue
        for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            for method in cls.body:
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef) and len(method.body) == 1:
                    text = ast.unparse(method.body[0])
                    if text.startswith(FORWARDS):
                        offenders.append(f"{module}:{method.lineno} {cls.name}.{method.name}")
    return offenders


DML = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH ")


def _statement(text: str) -> str:
    """A statement as both drivers would run it: marks, array types, spacing and case aside."""
    text = " ".join(text.replace("%s", "?").replace("::VARCHAR[]", "::text[]").split()).lower()
    return text


def _statements(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """The module's SQL statements (an f-string with its holes as written) and their lines."""
    parts = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v) + "}"
                           for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            text = node.value
        else:
            continue
        if text.lstrip().upper().startswith(DML):
            yield text, node.lineno


def a_statement_is_written_once_for_both_backends(house: House) -> list[str]:
    """What the engines both speak is written once, over the dialect layer (``proxy/store/sql_*.py``):
    no statement stands in DuckDB's modules and again in PostgreSQL's."""
    found: dict[str, dict[str, str]] = defaultdict(dict)   # statement -> backend -> where
    for module, tree in house.trees.items():
        backend = next((b for b in BACKENDS if within(module, b)), None)
        if backend is not None:
            for text, line in _statements(tree):
                found[_statement(text)].setdefault(backend, f"{module}:{line}")
    return [" and ".join(sorted(where.values())) for where in found.values() if len(where) > 1]


def the_chat_gateway_asks_the_knowledge_service_to_ground_a_turn(house: House) -> list[str]:
    """``knowledge.ground`` (proxy/knowledge/grounding.py) plans, retrieves and injects for the chat
    turn as for /rag/query: the gateway imports nothing of the retrieval."""
    return [f"{i.module}:{i.line} imports {i.target}" for i in house.imports
            if within(i.module, "proxy.gateway") and within(i.target, "proxy.retrieval")]


# each rule, and a violation of it to plant: module name -> source
RULES: dict[Callable[[House], list[str]], dict[str, str]] = {
    only_the_store_imports_its_engines: {"proxy__retrieval__planted": "import duckdb\n"},
    sql_is_written_only_in_the_store: {"proxy__knowledge__planted": "def f(con):\n    con.execute('select 1')\n"},
    no_module_imports_another_in_a_circle: {"proxy__core__planted_a": "import proxy.core.planted_b\n",
                                            "proxy__core__planted_b": "import proxy.core.planted_a\n"},
    the_folders_are_layers: {"proxy__core__planted": "from proxy.store.store import KnowledgeStore\n"},
    the_surfaces_reach_the_knowledge_base_through_the_service: {
        "proxy__rag_api__planted": "from proxy.store.store import KnowledgeStore\n"},
    nothing_reaches_into_another_objects_private_parts: {"proxy__knowledge__planted": "def f(o):\n    return o._x\n"},
    the_control_plane_imports_only_the_kernel: {
        "proxy__control__planted": "from proxy.store.changes import pair_key\n"},
    the_guards_and_the_upstream_never_import_the_store: {
        "proxy__upstream__planted": "from proxy.store.protocols.cache import CacheTables\n"},
    monitoring_imports_only_the_kernel: {
        "proxy__monitoring__planted": "from proxy.guards.middleware import KeyCheck\n"},
    the_surfaces_side_by_side_import_none_of_each_other: {
        "admin__planted": "from proxy.rag_api.routes_keys import list_keys\n"},
    one_holder_writes_the_control_planes_lists: {
        "proxy__knowledge__planted": "def f(lists):\n    lists.update_sync('kbs', dict)\n"},
    no_class_name_is_used_twice: {"proxy__gateway__planted": "class KnowledgeStore:\n    pass\n"},
    nothing_outside_the_store_hands_it_a_callback_into_its_memory: {
        "proxy__merging__planted": "async def f(store):\n    return await store.read_memory(lambda r, g: r)\n"},
    sectioned_components_never_take_the_whole_settings: {
        "proxy__upstream__planted": "from proxy.core.settings import Settings\n",
        "proxy__rag_api__planted": "def f(request):\n    return request.app.state.gateway.settings.mode\n"},
    a_backend_holds_statements_and_the_adapter_is_one: {
        "proxy__store__duckdb__planted": "class Twice:\n    def get_sync(self, key):\n"
                                         "        return self.db.read_sync(get, key)\n"},
    the_chat_gateway_asks_the_knowledge_service_to_ground_a_turn: {
        "proxy__gateway__planted": "from proxy.retrieval.context import inject\n"},
    a_statement_is_written_once_for_both_backends: {
        "proxy__store__duckdb__planted": "def f(con):\n    con.execute('SELECT id FROM documents WHERE id = ?', [1])\n",
        "proxy__store__postgres__planted": "def f(con):\n"
                                           "    con.execute('SELECT id FROM documents\\n WHERE id = %s', [1])\n"},
    retrieval_reads_the_store_through_its_narrow_face: {
        "proxy__retrieval__planted": "def f(store):\n    return store.read_memory_sync(lambda rows, graph: rows)\n"},
}


@pytest.fixture(scope="module")
def house() -> House:
    return House.on_disk()


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_house_keeps_the_rule(house: House, rule: Callable[[House], list[str]]) -> None:
    assert rule(house) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_rule_finds_a_planted_violation(house: House, rule: Callable[[House], list[str]]) -> None:
    planted = RULES[rule]
    offenders = rule(house.planted(**planted))
    assert offenders, f"{rule.__name__} found nothing wrong in {sorted(planted)}"
    # it names what was planted: the module, its folder (a circle of folders) or its class
    assert any(name.replace("__", ".").rsplit(".", 1)[0] in offender or "KnowledgeStore" in offender
               for offender in offenders for name in planted), offenders


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
