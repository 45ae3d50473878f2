"""The architecture in the imports: faces on top, no cycles where the design forbids them."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FACES = ("kanban.cli", "kanban.web", "kanban.mcp_server")


def package_files() -> Iterator[tuple[str, Path]]:
    """(module name, file) for every module of the installed namespace."""
    mapped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    roots = {"kanban": REPO / "kanban", **{name: REPO / path for name, path in mapped.items()}}
    for name, root in roots.items():
        for file in root.rglob("*.py"):
            parts = file.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((name, *parts)), file


def imported(file: Path) -> set[str]:
    """Every module a file imports, at any depth (type-checking imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_nothing_below_the_faces_imports_them() -> None:
    offenders = [f"{module} imports {name}" for module, file in package_files()
                 if not module.startswith(FACES)
                 for name in imported(file) if name.startswith(FACES)]
    assert offenders == []


def test_the_dispatcher_loop_and_rescue_do_not_import_each_other() -> None:
    files = dict(package_files())
    assert not {n for n in imported(files["kanban.dispatcher.rescue"])
                if n.startswith("kanban.dispatcher.loop")}
    loop = imported(files["kanban.dispatcher.loop"])
    assert "kanban.dispatcher.rescue" in loop  # the loop uses rescue, never the reverse


# -- no import circle anywhere ------------------------------------------------------------------
# Every import statement counts, at any depth: those under `if TYPE_CHECKING:` (mypy follows
# them, and they tie the two modules' designs together as firmly) and those inside functions
# (a late import hides a circle, it does not break it). `from P import N` is an edge to P
# (it reads P's namespace: its __init__, even its __getattr__, before it looks for a module
# P.N) and to the module P.N when there is one; `import P.M` and `from P.M import N` are
# edges to P.M alone. So a package's modules import their siblings by their full names
# (`import kanban.agent.tls as tls`) when the package's __init__ is a facade over them.

Edge = tuple[str, str, int]  # importer, imported, line


def source_roots() -> dict[str, Path]:
    """The installed namespace's roots (pyproject's package-dir) and the benchmarks."""
    mapped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    return {"kanban": REPO / "kanban", "bench": REPO / "bench",
            **{name: REPO / path for name, path in mapped.items()}}


def modules_under(roots: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """module name: (file, whether it is a package's __init__)."""
    found = {}
    for name, root in roots.items():
        for file in root.rglob("*.py"):
            parts = file.relative_to(root).with_suffix("").parts
            package = parts[-1] == "__init__"
            found[".".join((name, *(parts[:-1] if package else parts)))] = (file, package)
    return found


def import_edges(roots: dict[str, Path]) -> list[Edge]:
    """Every import of one of our modules by another (self-imports left out)."""
    modules = modules_under(roots)
    edges: list[Edge] = []
    for module, (file, package) in modules.items():
        here = module.split(".") if package else module.split(".")[:-1]
        for node in ast.walk(ast.parse(file.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here[:len(here) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            edges += [(module, t, node.lineno) for t in targets if t in modules and t != module]
    return edges


def circles(edges: list[Edge]) -> list[list[str]]:
    """One circle per strongly connected group of modules, as a path that returns to its
    start (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return [_path_round(graph, group) for group in groups]


def _path_round(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """The shortest way from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:  # (no module imports itself: node is not start)
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if child not in came:
                    came[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no way round {group}")


def describe(circle: list[str], edges: list[Edge]) -> str:
    lines = {(a, b): n for a, b, n in edges}
    return " -> ".join([*(f"{a} (line {lines[a, b]})" for a, b in pairwise(circle)),
                        circle[-1]])


def test_no_import_circle_anywhere() -> None:
    edges = import_edges(source_roots())
    assert [describe(c, edges) for c in circles(edges)] == []


def test_a_planted_circle_is_found_and_named(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.c import C\n")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from .sub.c import C\n")
    (pkg / "sub" / "c.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # into the circle, not part of it
    (pkg / "facade").mkdir()
    (pkg / "facade" / "__init__.py").write_text("from pkg.facade.f import F\n")
    (pkg / "facade" / "f.py").write_text("import pkg.facade.g\nfrom pkg.facade import g\n")
    (pkg / "facade" / "g.py").write_text("")
    edges = import_edges({"pkg": pkg})
    assert [describe(c, edges) for c in circles(edges)] == [
        "pkg.a (line 1) -> pkg.b (line 3) -> pkg.sub.c (line 2) -> pkg.a",
        "pkg.facade (line 1) -> pkg.facade.f (line 2) -> pkg.facade"]


# -- the domain core in layers ------------------------------------------------------------------
# Each layer may import those below it, never one above, not even through another module.
DOMAIN_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("shared types", frozenset({"kanban.states", "kanban.card_types"})),
    ("state machine", frozenset({"kanban.machine"})),
    ("policies", frozenset({"kanban.cards", "kanban.children", "kanban.comments",
                            "kanban.dependencies", "kanban.dependency_failure",
                            "kanban.waiting"})),
    ("reactions", frozenset({"kanban.reactions"})),
    ("actions", frozenset({"kanban.transitions", "kanban.review", "kanban.triage"})),
)


def reachable(edges: list[Edge], start: str) -> set[str]:
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_domain_core_imports_only_downwards() -> None:
    edges = import_edges(source_roots())
    offenders = []
    for level, (name, members) in enumerate(DOMAIN_LAYERS):
        above = {m: layer for layer, ms in DOMAIN_LAYERS[level + 1:] for m in ms}
        offenders += [f"{module} ({name}) reaches {hit} ({above[hit]})"
                      for module in sorted(members)
                      for hit in sorted(reachable(edges, module) & above.keys())]
    assert offenders == []


def test_the_state_machine_knows_no_policy() -> None:
    edges = import_edges(source_roots())
    machine = {b for a, b, _ in edges if a == "kanban.machine"}
    policies = set().union(*(ms for _, ms in DOMAIN_LAYERS[2:]))
    assert machine, "kanban.machine imports the states and the store"
    assert not machine & policies
    assert "kanban.reactions" not in reachable(edges, "kanban.machine")
