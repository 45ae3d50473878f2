"""The architecture in the imports: faces on top, no cycles where the design forbids them."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
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
