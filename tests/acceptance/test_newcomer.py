"""What a newcomer meets: installing, the current directory, piping, refusals, PostgreSQL.

Every command here is the real console script in a subprocess.
"""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
import tomllib
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.db import fresh_postgres_database

SCRIPT = Path(sys.executable).with_name("kanban")
KANBAN = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-P", "-m", "kanban.cli"]
REPO = Path(__file__).resolve().parents[2]
SHADOWED = ("tools", "state", "agent", "worker", "cron", "dispatcher", "kanban")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The parent environment minus kanban settings and model keys, with a throwaway home."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("KANBAN_", "OPENAI_", "ANTHROPIC_"))}
    clean.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "home" / "data"),
                 NO_COLOR="1")
    clean.pop("PYTHONPATH", None)
    return clean


def kanban(*args: str, cwd: Path, env: dict[str, str], command: list[str] = KANBAN,
           stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def ok(*args: str, cwd: Path, env: dict[str, str]) -> str:
    done = kanban(*args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def hostile_folder(where: Path) -> Path:
    """A project holding packages named like ours, each raising on import."""
    where.mkdir(parents=True, exist_ok=True)
    for name in SHADOWED:
        package = where / name
        package.mkdir()
        (package / "__init__.py").write_text(
            f"raise RuntimeError('imported {name} from the current directory')\n")
    (where / "sqlite3.py").write_text("raise RuntimeError('imported sqlite3 from the cwd')\n")
    return where


def test_init_add_dispatch_in_a_folder_of_look_alike_packages(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    project = hostile_folder(tmp_path / "project")
    ok("init", cwd=project, env=env)
    assert ok("add", "Say hello", "--goal", "greet", cwd=project, env=env) == "#1\n"
    done = kanban("dispatch", "--once", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert "RuntimeError" not in done.stderr
    card = json.loads(ok("show", "1", "--json", cwd=project, env=env))["card"]
    assert card["status"] == "done", card
    assert "claimed #1 attempt 1" in done.stderr and "#1 done (completed)" in done.stderr


def test_a_regular_install_has_one_top_level_name(tmp_path: Path, env: dict[str, str]) -> None:
    from bench.install import regular_install

    venv = regular_install(tmp_path / "install")
    site = Path(subprocess.run([str(venv / "bin/python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    shown = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"),
                            "show", "--files", "kanban-workbench"],
                           capture_output=True, text=True, check=True).stdout
    files = shown.split("Files:", 1)[1].split()
    tops = {f.split("/")[0] for f in files if not f.startswith("..")}
    assert tops == {"kanban", "kanban_workbench-0.1.0.dist-info"}, tops
    assert [f for f in files if f.startswith("..")] == ["../../../bin/kanban"]
    imports = {p.name for p in site.iterdir()} - {"kanban-deps.pth", "__pycache__"}
    assert imports == {"kanban", "kanban_workbench-0.1.0.dist-info"}
    elsewhere = hostile_folder(tmp_path / "elsewhere")
    done = kanban("--version", cwd=elsewhere, env=env, command=[str(venv / "bin/kanban")])
    assert (done.returncode, done.stdout, done.stderr) == (0, "kanban 0.1.0\n", "")
    worker = subprocess.run([str(venv / "bin/python"), "-P", "-c",
                             "import kanban.worker.forkserver, kanban.state.migrations, "
                             "kanban.cron.firing; print('ok')"],
                            cwd=elsewhere, env=env, capture_output=True, text=True)
    assert worker.stdout == "ok\n", worker.stderr  # the package data (SQL files) came too


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, mapped = set(config["packages"]), config["package-dir"]
    folders = {name: REPO / path for name, path in mapped.items()}
    folders["kanban"] = REPO / "kanban"
    found = set()
    for name, root in folders.items():
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root).parts
            found.add(".".join((name, *relative)))
    modules = {p.parent for root in folders.values() for p in root.rglob("*.py")}
    assert all((m / "__init__.py").exists() for m in modules), "a folder of modules lacks an " \
        "__init__.py, so setuptools would leave it out"
    assert found == listed, f"missing from pyproject: {found - listed}; stale: {listed - found}"
    top = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()}
    assert top - {"tests", "bench"} == {n.split(".")[-1] for n in mapped} | {"kanban"}


READ_AND_ADD = [["--help"], ["board"], ["list"], ["show", "1"], ["add", "another"],
                ["status"], ["boards"], ["workers"], ["log", "1"], ["list", "--all"],
                ["board", "--json"], ["cron", "list"]]
NEVER = ("sqlalchemy", "sqlmodel", "pydantic", "openai", "anthropic", "httpx",
         "kanban.agent", "kanban.dispatcher", "kanban.worker", "kanban.tools")


@pytest.mark.parametrize("args", READ_AND_ADD, ids=" ".join)
def test_read_and_add_commands_import_no_orm_and_no_runtime(tmp_path: Path, env: dict[str, str],
                                                             args: list[str]) -> None:
    ok("init", cwd=tmp_path, env=env)
    ok("add", "first", cwd=tmp_path, env=env)
    probe = ("import sys\nfrom kanban.cli.app import main\n"
             f"try:\n    main({args!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
             "print('MODULES', code, sorted(sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    code, modules = done.stderr.split("MODULES ", 1)[1].split(" ", 1)
    assert code in ("0", "None"), done.stderr
    loaded = [m for m in ast.literal_eval(modules)
              if any(m == name or m.startswith(f"{name}.") for name in NEVER)]
    assert loaded == []
    if args != ["cron", "list"]:  # piped output is plain: Rich is for terminals
        assert "'rich'" not in modules


def test_piped_list_keeps_long_titles_whole_on_one_line(tmp_path: Path,
                                                        env: dict[str, str]) -> None:
    ok("init", cwd=tmp_path, env=env)
    title = " ".join(f"word{i:03d}" for i in range(38))[:300]
    assert len(title) == 300
    ok("add", title, cwd=tmp_path, env={**env, "COLUMNS": "40"})
    listed = subprocess.run(f"{' '.join(KANBAN)} list | cat", shell=True, cwd=tmp_path,
                            env={**env, "COLUMNS": "40"}, capture_output=True, text=True)
    [line] = listed.stdout.splitlines()
    assert line.endswith(title) and line.startswith("#1  ready")
    board = ok("board", cwd=tmp_path, env={**env, "COLUMNS": "40"})
    assert any(line.endswith(title) for line in board.splitlines())


def test_list_answers_with_the_newest_page_and_a_footer(tmp_path: Path,
                                                       env: dict[str, str]) -> None:
    ok("init", cwd=tmp_path, env=env)
    db = tmp_path / ".kanban" / "kanban.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.executemany(
            "INSERT INTO card (board, title, goal, context, status, priority, profile, depth, "
            "created_by, attempt, max_attempts, retry_base, run_after, created_at, updated_at, "
            "input_tokens, output_tokens, cached_tokens) VALUES ('default', ?, '', '', "
            "'ready', 0, 'default', 0, 'user', 0, 3, 0, ?, ?, ?, 0, 0, 0)",
            [(f"card {i}", "2025-01-01 00:00:00.000000", f"2025-01-01 00:{i // 60:02d}:"
              f"{i % 60:02d}.000000", "2025-01-01 00:00:00.000000") for i in range(1, 121)])
        conn.commit()
    done = kanban("list", cwd=tmp_path, env=env)
    lines = done.stdout.splitlines()
    assert len(lines) == 50 and lines[0].startswith("#120 ") and lines[-1].startswith(" #71 ")
    assert done.stderr == "50 newest of 120 cards; 70 more (--limit N, --all or --since WHEN)\n"
    assert len(ok("list", "--all", cwd=tmp_path, env=env).splitlines()) == 120
    assert len(ok("list", "-n", "7", cwd=tmp_path, env=env).splitlines()) == 7
    since = ok("list", "--since", "2025-01-01T00:01:50+00:00", cwd=tmp_path, env=env)
    assert [line.split()[0] for line in since.splitlines()] == [f"#{i}" for i in
                                                                range(120, 109, -1)]
    streamed = json.loads(ok("list", "--all", "--json", cwd=tmp_path, env=env))
    assert (len(streamed["cards"]), streamed["total"]) == (120, 120)


def test_refused_run_stores_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    ok("init", cwd=tmp_path, env=env)
    before = ok("list", "--json", cwd=tmp_path, env=env)
    for model, why in (("nosuch:x", "unknown model provider 'nosuch'"),
                       ("openai:gpt-4o-mini", "OPENAI_API_KEY is not set")):
        done = kanban("run", "Plan a launch", "--model", model, cwd=tmp_path, env=env)
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and why in done.stderr, done.stderr
    assert ok("list", "--json", cwd=tmp_path, env=env) == before


def test_run_reads_the_goal_from_stdin_and_answers_as_json(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    ok("init", cwd=tmp_path, env=env)
    done = kanban("run", "-", "--json", cwd=tmp_path, env=env, stdin="Write a haiku\n")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["answer"].startswith("Answer for: Write a haiku")
    assert answer["card_ids"][0] == answer["card_id"] == 1
    assert len(answer["children"]) == 3 and set(answer["usage"]) == {
        "input_tokens", "output_tokens", "cached_tokens"}
    quiet = kanban("run", "Write a poem", "-q", cwd=tmp_path, env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout.startswith("Answer for: Write a poem")


def test_global_options_work_after_the_command(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "k.db"
    ok("--db", str(db), "init", cwd=tmp_path, env=env)
    ok("boards", "create", "ops", "--db", str(db), cwd=tmp_path, env=env)
    assert ok("add", "on ops", "--db", str(db), "--board", "ops", cwd=tmp_path, env=env) == "#1\n"
    assert ok("-b", "ops", "list", "--db", str(db), cwd=tmp_path, env=env).count("on ops") == 1
    assert ok("list", "--db", str(db), cwd=tmp_path, env=env) == ""
    shown = ok("show", "1", "--utc", "--db", str(db), cwd=tmp_path, env=env)
    assert " UTC" in shown and "+00:00" not in shown


@pytest.mark.postgres
def test_db_option_takes_a_postgresql_url(tmp_path: Path, env: dict[str, str]) -> None:
    with fresh_postgres_database() as url:
        ok("--db", url, "init", cwd=tmp_path, env=env)
        assert ok("add", "on postgres", "--db", url, cwd=tmp_path, env=env) == "#1\n"
        board = ok("--db", url, "board", cwd=tmp_path, env=env)
        assert board.startswith("board default · 1 card · no dispatcher")
        status = json.loads(ok("status", "--json", "--db", url, cwd=tmp_path, env=env))
        assert status["database"].startswith("postgresql://") and status["total"] == 1
