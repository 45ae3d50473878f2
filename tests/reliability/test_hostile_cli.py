"""Hostile and broken input through the real CLI: a clear one-line error, never a traceback,
and the stored data intact.

Every case runs the CLI in its own process on its own copy of one database, all cases once
per module; the tests then judge one case each. Cases marked `exec` start the real `kanban`
command (an interpreter start each: over a second of imports); the others run the same
entry point in a process forked from a pre-imported interpreter (`WarmCli`), which keeps
this table within the suite's time budget.

Not testable here, honestly:
- a 1 MB field through argv: Linux refuses any single argument over 128 KiB
  (MAX_ARG_STRLEN) before kanban runs, so the CLI cases use 120 KB fields and the 1 MB
  fields go through the library API (`test_megabyte_fields_are_refused_by_the_api`);
- NUL bytes in argv (impossible in a C string);
- a read-only file by permissions: the tests run as root, which ignores file modes. The two
  read-only cases use an immutable file (`chattr +i`, which binds root too) and a read-only
  bind mount in a private mount namespace (`unshare -m`); each is skipped where the
  filesystem or the container does not allow it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kanban.cards import NewCard
from kanban.errors import ValidationError
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.support.hostile import (
    CliRun,
    WarmCli,
    clean_env,
    clean_error_problem,
    dump_cards,
    file_digest,
    rows,
    run_cli,
)
from tests.support.pg import skip_or_fail

SQL_TITLE = "'; DROP TABLE card; --"
SQL_GOAL = '" OR 1=1; DELETE FROM card WHERE "a"="a'
BIG = "a" * 120_000  # under the kernel's 128 KiB limit for one argument


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str | bytes, ...]
    says: str = ""  # a phrase the error line must contain
    setup: str = "plain"
    exit_code: int = 1
    exec: bool = False  # start the real command (argv decoding and all), not a warm fork


CASES = [
    Case("sql-metacharacters-stored-verbatim", ("add", SQL_TITLE, "--goal", SQL_GOAL),
         exit_code=0),
    Case("sql-metacharacters-in-board", ("add", "x", "--board", f"x{SQL_TITLE}"),
         "no board named"),
    Case("control-characters-in-title", ("add", "bell\x07 \x1b[31mred"), "control characters"),
    Case("invalid-utf8-title", ("add", b"bad \xff\xfe title"), "not valid UTF-8 text",
         exec=True),
    Case("120kb-goal", ("add", "x", "--goal", BIG), "goal is 120,000 characters"),
    Case("120kb-context", ("add", "x", "--context", BIG), "context is 120,000 characters"),
    Case("absurd-priority", ("add", "x", "--priority", str(10**12)), "priority must be between"),
    Case("zero-max-attempts", ("add", "x", "--max-attempts", "0"), "max attempts must be"),
    Case("negative-max-attempts", ("add", "x", "--max-attempts", "-1"), "max attempts must be"),
    Case("negative-timeout", ("add", "x", "--timeout", "-5"), "timeout must be between"),
    Case("non-numeric-priority", ("add", "x", "--priority", "abc"), "--priority", exit_code=2),
    Case("card-id-beyond-64-bits", ("show", "99999999999999999999"),
         "too large to be a card id", exit_code=2),
    Case("missing-card-complete", ("complete", "424242", "--summary", "x"), "no card #424242"),
    Case("missing-card-link", ("link", "1", "424242"), "no card #424242"),
    Case("malformed-config-add", ("add", "x"), "malformed config", setup="bad-toml"),
    Case("malformed-config-dispatch", ("dispatch", "--once"), "malformed config",
         setup="bad-toml"),
    Case("invalid-config-value-dispatch", ("dispatch", "--once"),
         "lease_s must be a positive number", setup="bad-value"),
    Case("truncated-database", ("list",), "corrupt", setup="truncated"),
    Case("corrupted-card-table-page", ("add", "x"), "corrupt", setup="corrupt-page"),
    Case("overwritten-header", ("list",), "corrupt or not a kanban database",
         setup="corrupt-header"),
    Case("immutable-database-file", ("add", "x"), "read-only", setup="immutable"),
    Case("read-only-mount", ("add", "x"), "database", setup="ro-mount", exec=True),
]


@dataclass
class Outcome:
    run: CliRun | None = None
    skip: str | None = None
    before: list[tuple[Any, ...]] = field(default_factory=list)
    after: list[tuple[Any, ...]] = field(default_factory=list)
    digest_before: str = ""
    digest_after: str = ""


def _template(folder: Path) -> Path:
    path = folder / "template.db"
    db = open_database(DbLocation(str(path), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        first = kb.add_card(NewCard(title="first", goal="keep me")).id
        kb.add_card(NewCard(title="second", depends_on=(first,)))
        kb.comment(first, "a comment")
    finally:
        db.dispose()  # the last connection checkpoints: one self-contained file
    return path


def _corrupt_page(db: Path) -> None:
    (root,), = rows(db, "SELECT rootpage FROM sqlite_master WHERE name = 'card'")
    (size,), = rows(db, "PRAGMA page_size")
    with open(db, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xde\xad\xbe\xef" * (size // 4))


def _prepare(case: Case, template: Path, folder: Path,
             cleanups: list[Callable[[], None]]) -> tuple[Path, list[str], str | None]:
    """Copy the template for `case` and break it as the case says; returns the database,
    a command prefix and, where the setup is impossible here, why."""
    folder.mkdir()
    db = folder / "kanban.db"
    shutil.copy(template, db)
    prefix: list[str] = []
    if case.setup == "bad-toml":
        (folder / "config.toml").write_text('[limits\nlease_s = "x"\n')
    elif case.setup == "bad-value":
        (folder / "config.toml").write_text("[limits]\nlease_s = -3\n")
    elif case.setup == "truncated":
        with open(db, "r+b") as f:
            f.truncate(db.stat().st_size // 2)
    elif case.setup == "corrupt-page":
        _corrupt_page(db)
    elif case.setup == "corrupt-header":
        with open(db, "r+b") as f:
            f.write(b"X" * 100)
    elif case.setup == "immutable":
        if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
            return db, prefix, "chattr +i is not possible on this filesystem"
        cleanups.append(lambda: subprocess.run(["chattr", "-i", str(db)], check=True))
    elif case.setup == "ro-mount":
        script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
        prefix = ["unshare", "-m", "sh", "-c", script, str(folder)]
        probe = subprocess.run([*prefix, "true"], capture_output=True)
        if probe.returncode != 0:
            return db, prefix, f"no read-only bind mount here: {probe.stderr.decode()[:200]}"
    return db, prefix, None


def _run_case(case: Case, db: Path, prefix: list[str], home: Path,
              warm: WarmCli | None) -> Outcome:
    intact = case.setup in ("plain", "bad-toml", "bad-value", "immutable", "ro-mount")
    out = Outcome(digest_before=file_digest(db))
    if intact:
        out.before = dump_cards(db)
    if warm is None:
        out.run = run_cli(db, *case.args, env=clean_env(home), prefix=prefix)
    else:
        out.run = warm.run(db, *case.args, env=clean_env(home))
    if intact:
        out.after = dump_cards(db)
    out.digest_after = file_digest(db)
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory,
             warm_cli: WarmCli) -> Iterator[dict[str, Outcome]]:
    root = tmp_path_factory.mktemp("hostile")
    template = _template(root)
    cleanups: list[Callable[[], None]] = []
    results: dict[str, Outcome] = {}
    try:
        prepared = {case.id: _prepare(case, template, root / case.id, cleanups)
                    for case in CASES}
        with ThreadPoolExecutor(len([c for c in CASES if c.exec])) as pool:
            jobs = {c.id: pool.submit(_run_case, c, *prepared[c.id][:2], root, None)
                    for c in CASES if c.exec and not prepared[c.id][2]}
            for case in CASES:  # one at a time through the warm server meanwhile
                db, prefix, skip = prepared[case.id]
                if skip:
                    results[case.id] = Outcome(skip=skip)
                elif not case.exec:
                    results[case.id] = _run_case(case, db, prefix, root, warm_cli)
        results |= {name: job.result() for name, job in jobs.items()}
        yield results
    finally:
        for cleanup in cleanups:
            cleanup()


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id)
    for c in CASES])
def test_hostile_input(case: Case, outcomes: dict[str, Outcome]) -> None:
    out = outcomes[case.id]
    if out.skip:
        skip_or_fail(out.skip)
    run = out.run
    assert run is not None
    assert "Traceback" not in run.stdout + run.stderr
    if case.exit_code == 0:
        _assert_stored_verbatim(out)
        return
    problem = clean_error_problem(run, exit_code=case.exit_code)
    assert problem is None, problem
    assert case.says in run.stderr, run.stderr
    assert out.after == out.before  # empty for the files too broken to read
    if case.setup in ("truncated", "corrupt-page", "corrupt-header", "immutable", "ro-mount"):
        assert out.digest_after == out.digest_before, "a failed command changed the file"


def _assert_stored_verbatim(out: Outcome) -> None:
    assert out.run is not None
    assert (out.run.code, out.run.stderr) == (0, ""), out.run.stderr
    new_id = int(out.run.stdout.strip().lstrip("#"))
    assert out.after[:-1] == out.before  # the card table is there, its rows untouched
    row = out.after[-1]
    assert row[0] == new_id
    assert (SQL_TITLE, SQL_GOAL) in [(row[2], row[3])]  # title and goal exactly as given


def test_megabyte_fields_are_refused_by_the_api(tmp_path: Path) -> None:
    db = open_database(DbLocation(str(tmp_path / "kanban.db"), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        card = kb.add_card(NewCard(title="target")).id
        mb = "x" * 2**20
        for new in (NewCard(title=mb), NewCard(title="t", goal=mb),
                    NewCard(title="t", context=mb)):
            with pytest.raises(ValidationError):
                kb.add_card(new)
        with pytest.raises(ValidationError):
            kb.comment(card, mb)
        with pytest.raises(ValidationError):
            kb.complete(card, mb)
        assert [c.id for c in kb.list_cards()] == [card]
        assert kb.detail(card).comments == ()
        assert kb.card(card).status == "ready"
    finally:
        db.dispose()


def test_a_megabyte_argument_cannot_even_reach_the_cli(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="Argument list too long"):
        run_cli(tmp_path / "kanban.db", "add", "x", "--goal", "a" * 2**20)
