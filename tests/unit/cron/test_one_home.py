"""Cron has one home: the board domain imports nothing of it, and only it imports APScheduler."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("kanban", "state", "agent", "tools", "worker", "cron", "dispatcher")
FACES = ("kanban/cli", "kanban/web")


def sources(folder: str) -> Iterator[Path]:
    yield from sorted((ROOT / folder).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside functions, as dotted names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_tree_is_where_the_test_looks() -> None:
    assert (ROOT / "cron" / "firing.py").is_file() and (ROOT / "kanban" / "cards.py").is_file()
    assert not (ROOT / "kanban" / "cron_jobs.py").exists()
    assert not (ROOT / "cron" / "cronexpr.py").exists()


def test_the_board_domain_imports_nothing_from_cron() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources("kanban")
        if not any(path.is_relative_to(ROOT / face) for face in FACES)
        for name in imported(path)
        if name == "kanban.cron" or name.startswith("kanban.cron.")
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "cron"])
def test_only_cron_imports_apscheduler(package: str) -> None:
    offenders = [f"{path.relative_to(ROOT)} imports {name}"
                 for path in sources(package) for name in imported(path)
                 if name.split(".")[0] == "apscheduler"]
    assert not offenders, offenders


def test_cron_does_import_apscheduler_for_its_triggers() -> None:
    """The check above would pass vacuously if nothing imported it."""
    users = {path.name for path in sources("cron")
             if any(name.startswith("apscheduler.triggers") for name in imported(path))}
    assert users == {"schedule.py", "crontab.py"}


def test_the_faces_reach_cron_through_its_package() -> None:
    """`kanban cron ...` is offered by the CLI, which imports cron (and nothing else does)."""
    assert any(name.startswith("kanban.cron")
               for name in imported(ROOT / "kanban" / "cli" / "cron.py"))


def test_importing_the_cron_package_imports_nothing() -> None:
    """Every `kanban ...` command loads the CLI's cron group: the package itself stays free."""
    assert imported(ROOT / "cron" / "__init__.py") == set()
    light = imported(ROOT / "cron" / "kinds.py")
    assert light <= {"__future__", "__future__.annotations", "enum", "enum.StrEnum"}
