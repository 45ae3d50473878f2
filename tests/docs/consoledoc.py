"""Console examples in Markdown: find them, run a page's in one shell, compare what came out.

A ```console block holds commands (`$ ` lines; a line ending in `\\` goes on) each followed
by its output. An HTML comment right before a block steers it:

    <!-- test: skip REASON -->        not run; the reason is in the test id
    <!-- test: rows FILE -->          not run (a benchmark, say): each Markdown table row the
                                      block shows, header included, must be a row of FILE
                                      (relative to the repository), cell for cell
    <!-- test: fresh -->              a new, empty project folder from here on
    <!-- test: unordered -->          each command's lines may come in any order
    <!-- test: needs postgres -->     the page's shell gets $PG, a fresh PostgreSQL database
                                      (shown as SHOWN_PG); without a server the block skips
    <!-- test: needs llm -->          the page's OLLAMA address (Ollama's port on loopback) is
                                      a fake OpenAI-compatible server from tests/support
    <!-- test: setup
    shell lines run before the block, output unchecked (a failure fails the block)
    -->

A line that is just `…` in an output stands for any number of lines. Both sides go
through the same normaliser, so the pages keep realistic times, pids and durations.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```console[ \t]*$")
MARKER = re.compile(r"<!--\s*test:\s*(\w+)[ \t]*(.*?)\s*-->", re.S)
SHOWN_HOME = "/home/you"  # where the pages' reader lives; the temp home is shown as this
SHOWN_PG = "postgresql://kanban@db.internal/kanban"  # the pages' PostgreSQL database
OLLAMA = "127.0.0.1:11434"  # a page's model server: the fake one under test
SEPARATOR = "\x1e"
ROOT = Path(__file__).resolve().parents[2]  # the repository: where `test: rows` files are


@dataclass
class Command:
    line: int
    text: str  # as the page writes it, continuation lines joined
    expected: str


@dataclass
class Block:
    page: str
    line: int
    commands: list[Command]
    skip: str | None = None
    rows_of: str | None = None  # the file whose table rows the block shows
    fresh: bool = False
    unordered: bool = False
    setup: str = ""
    needs: str | None = None

    @property
    def id(self) -> str:
        suffix = f"-skip({self.skip})" if self.skip else ""
        return f"{self.page}:{self.line}{suffix}"

    @property
    def runs(self) -> bool:
        """Its commands run in the page's shell."""
        return not self.skip and self.rows_of is None


@dataclass
class Outcome:
    outputs: dict[int, str] = field(default_factory=dict)  # command line → its output
    setup_failures: dict[int, str] = field(default_factory=dict)  # block line → output


def blocks(path: Path, page: str) -> list[Block]:
    """Every ```console block of a page, with the markers of the comments just before it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: a console block that never ends")
        block = Block(page, i + 1, _commands(lines[i + 1:end], i + 2, page))
        _apply_markers(block, _comments_before(lines, i))
        found.append(block)
        i = end + 1
    return found


def _comments_before(lines: list[str], fence: int) -> str:
    """The HTML comments between the previous paragraph and the fence."""
    start = fence
    while start > 0 and (lines[start - 1].strip() == "" or "-->" in lines[start - 1]
                         or _inside_comment(lines, start - 1)):
        start -= 1
    return "\n".join(lines[start:fence])


def _inside_comment(lines: list[str], at: int) -> bool:
    opened = max((k for k in range(at + 1) if "<!--" in lines[k]), default=-1)
    closed = max((k for k in range(at + 1) if "-->" in lines[k]), default=-1)
    return opened > closed or (opened == at and opened >= 0)


def _apply_markers(block: Block, comments: str) -> None:
    for kind, rest in MARKER.findall(comments):
        if kind == "skip":
            block.skip = rest.strip() or "not runnable offline"
        elif kind == "rows" and rest.strip():
            block.rows_of = rest.strip()
        elif kind == "fresh":
            block.fresh = True
        elif kind == "unordered":
            block.unordered = True
        elif kind == "setup":
            block.setup = rest.strip()
        elif kind == "needs" and rest.strip() in ("postgres", "llm"):
            block.needs = rest.strip()
        else:
            raise ValueError(f"{block.page}:{block.line}: unknown marker 'test: {kind}'")


def _commands(body: list[str], first_line: int, page: str) -> list[Command]:
    commands: list[Command] = []
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            if commands:
                commands[-1].expected += body[i] + "\n"
            elif body[i].strip():
                raise ValueError(f"{page}:{first_line + i}: output before any `$ ` command")
            i += 1
            continue
        start, text = i, body[i][2:]
        while text.endswith("\\") and i + 1 < len(body):
            i += 1
            text = text[:-1] + " " + body[i].strip()
        commands.append(Command(first_line + start, text, ""))
        i += 1
    if not commands:
        raise ValueError(f"{page}:{first_line - 1}: a console block without a `$ ` command")
    return commands


# ---- running a page ---------------------------------------------------------------------

def environment(root: Path) -> dict[str, str]:
    """A newcomer's shell: no kanban settings or model keys, a throwaway home, this venv's
    `kanban` first on PATH, UTC, no colour."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KANBAN_", "OPENAI_", "ANTHROPIC_"))}
    env.pop("PYTHONPATH", None)
    home = root / "home"
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"), NO_COLOR="1",
               TZ="UTC", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def script(page_blocks: list[Block], home: Path) -> str:
    """One bash script for a page: each command's output (stderr with it, in the order a
    terminal shows them) follows a separator naming its line."""
    out = ["exec 2>&1 </dev/null", "fresh() { d=$(mktemp -d \"$HOME/project.XXXX\"); "
           "rm -rf \"$HOME/project\"; mv \"$d\" \"$HOME/project\"; cd \"$HOME/project\"; }",
           "fresh"]
    for block in page_blocks:
        if not block.runs:
            continue
        if block.fresh:
            out.append("fresh")
        if block.setup:
            out.append(f"printf '{SEPARATOR}setup {block.line}\\n'")
            out.append(f"( set -e\n{block.setup}\n ) || echo 'setup failed'")
        for command in block.commands:
            out.append(f"printf '{SEPARATOR}{command.line}\\n'")
            out.append(command.text)
    out.append(f"printf '{SEPARATOR}end\\n'")
    return "\n".join(out) + "\n"


@dataclass
class PageRun:
    """A page's shell, started; `outcome()` waits for it and reads what it printed."""

    process: subprocess.Popen[str]
    shown: dict[str, str]  # what the shell printed → how the page shows it
    timeout: float

    def outcome(self) -> Outcome:
        try:
            printed, _ = self.process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            printed, _ = self.process.communicate()
            raise AssertionError(f"the page's shell took over {self.timeout:g}s:\n"
                                 f"{printed[-2000:]}") from None
        for real, page in self.shown.items():
            printed = printed.replace(real, page)
        return parse(printed)


def start_page(page_blocks: list[Block], root: Path, *, timeout: float = 240,
               pg_url: str | None = None, llm_address: str | None = None) -> PageRun:
    """Start a page's examples in a shell of their own (pages run side by side: most of
    their time is spent waiting on workers); `llm_address` (host:port) stands in for
    OLLAMA, `pg_url` is $PG."""
    env = environment(root)
    home = Path(env["HOME"])
    home.mkdir(parents=True, exist_ok=True)
    text = script(page_blocks, home)
    shown = {str(home): SHOWN_HOME}
    if pg_url:
        env["PG"] = pg_url
        shown[pg_url] = SHOWN_PG
    if llm_address:
        text = text.replace(OLLAMA, llm_address)
        shown[llm_address] = OLLAMA
    process = subprocess.Popen(["bash", "-c", text], cwd=home, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return PageRun(process, shown, timeout)


def run_page(page_blocks: list[Block], root: Path, *, timeout: float = 240,
             pg_url: str | None = None, llm_address: str | None = None) -> Outcome:
    return start_page(page_blocks, root, timeout=timeout, pg_url=pg_url,
                      llm_address=llm_address).outcome()


def parse(printed: str) -> Outcome:
    outcome = Outcome()
    chunks = printed.split(SEPARATOR)[1:]
    for chunk in chunks:
        head, _, body = chunk.partition("\n")
        if head.startswith("setup "):
            if "setup failed" in body:
                outcome.setup_failures[int(head.split()[1])] = body
        elif head != "end":
            outcome.outputs[int(head)] = body
    if "end" not in [c.partition("\n")[0] for c in chunks]:
        raise AssertionError(f"the page's shell stopped early:\n{printed[-2000:]}")
    return outcome


# ---- comparing ---------------------------------------------------------------------------

_VOLATILE = [
    # times: 2026-11-23 11:12:47.574 +00:00, ISO with T and Z or an offset
    # (a zone's abbreviation changes with daylight saving: CET, CEST)
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?"
                r"(?: ?(?:[+-]\d\d:?\d\d|Z\b|[A-Z]{3,5}\b))?"), "<TIME>"),
    (re.compile(r"\bpid \d+"), "pid <PID>"),
    (re.compile(r"\b\d+ workers at most"), "<N> workers at most"),
    # durations and ages: 0.03s, 12ms, (3s ago), ⏲ in 21h, 1h30m
    (re.compile(r"\b\d+(?:\.\d+)?(?:ms|[smhd])(?:\d+[smh])*\b"), "<DUR>"),
    # token and cost figures depend on prompt lengths, and those on paths
    (re.compile(r"\b\d[\d,]*(?: in / | in, )\d[\d,]*(?= out)"), "<N> in / <N>"),
    (re.compile(r"\b\d[\d,]*/\d[\d,]*/\d[\d,]*\b"), "<N>/<N>/<N>"),
    (re.compile(r"\btokens? [\d,]+\b"), "tokens <N>"),
    (re.compile(r"\b[\d,]+ tokens\b"), "<N> tokens"),
    (re.compile(r"\bkanban \d+\.\d+\.\d+\S*"), "kanban <VERSION>"),
    # commit ids and other hashes: hex with a letter and a digit in it, and any short
    # commit id where git prints one ("on branch kanban/1 at 8634809": digits only 4% of
    # the time)
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b"), "<HEX>"),
    (re.compile(r"(?<= at )\d{7,40}\b"), "<HEX>"),
    (re.compile(r"─{3,}"), "───"),  # a table's rule is as wide as its widest row
    (re.compile(r"[ \t]+"), " "),  # column alignment follows the widest figure
]


def normalise(text: str) -> str:
    lines = []
    for line in text.rstrip().splitlines():
        for pattern, replacement in _VOLATILE:
            line = pattern.sub(replacement, line)
        lines.append(line.strip())
    return "\n".join(lines)


def matches(expected: str, actual: str, *, unordered: bool = False) -> bool:
    want, got = normalise(expected), normalise(actual)
    if unordered:
        return sorted(want.splitlines()) == sorted(got.splitlines())
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == "…" else re.escape(line) + r"\n"
                      for line in want.splitlines())
    return re.fullmatch(pattern, got + "\n" if got else "") is not None


def shown(command: Command) -> str:
    """The command as the page writes it, continuation lines joined (for messages)."""
    return command.text


def table_rows(text: str) -> list[list[str]]:
    """The rows of the Markdown tables in `text`, as stripped cells (rules left out)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [cell.strip() for cell in line[1:-1].split("|")]
        if not all(set(cell) <= set("-: ") for cell in cells):
            rows.append(cells)
    return rows


def rows_not_in(block: Block, root: Path) -> list[str]:
    """The table rows a `test: rows FILE` block shows that FILE does not have, each with
    FILE's row of the same first cell where there is one."""
    assert block.rows_of is not None
    source = root / block.rows_of
    if not source.is_file():
        return [f"{block.rows_of}: no such file"]
    known = {tuple(row) for row in table_rows(source.read_text(encoding="utf-8"))}
    by_key = {row[0]: row for row in known}
    shown_rows = table_rows("\n".join(c.expected for c in block.commands))
    if not shown_rows:
        return ["the block shows no table rows"]
    missing = []
    for row in shown_rows:
        if tuple(row) not in known:
            there = by_key.get(row[0])
            missing.append(f"{' | '.join(row)}\n  {block.rows_of} has: "
                           f"{' | '.join(there) if there else 'no such row'}")
    return missing


def update_rows(path: Path, page_blocks: list[Block], root: Path) -> int:
    """Rewrite each row a `test: rows FILE` block shows as FILE now has it (matched by its
    first cell; a row FILE lacks stays, for the test to name); how many changed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = 0
    for block in page_blocks:
        if block.rows_of is None or not (root / block.rows_of).is_file():
            continue
        recorded = {cells[0][0]: line.rstrip()
                    for line in (root / block.rows_of).read_text(encoding="utf-8").splitlines()
                    if (cells := table_rows(line))}
        at = block.line  # the fence's 1-based line = the 0-based index of the next line
        while not lines[at].startswith("```"):
            cells = table_rows(lines[at])
            now = recorded.get(cells[0][0]) if cells else None
            if now is not None and now != lines[at]:
                lines[at] = now
                changed += 1
            at += 1
    if changed:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def update(path: Path, outcome: Outcome, page_blocks: list[Block]) -> int:
    """Write what each command printed under it where the page no longer matches; returns
    how many outputs changed (read the diff before committing it)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    stale = [(c, outcome.outputs[c.line]) for b in page_blocks if b.runs
             for c in b.commands
             if not matches(c.expected, outcome.outputs[c.line], unordered=b.unordered)]
    for command, actual in sorted(stale, key=lambda pair: -pair[0].line):
        start = command.line  # the line after the command (1-based line = 0-based next)
        while lines[start - 1].endswith("\\"):
            start += 1
        old = command.expected.splitlines()
        gap = len(old) - len(command.expected.rstrip().splitlines())  # blank lines kept
        lines[start:start + len(old)] = actual.rstrip("\n").splitlines() + [""] * gap
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(stale)


def _run_standalone(page_blocks: list[Block]) -> Outcome:
    """A page's run outside pytest, with the fake model server and a fresh PostgreSQL
    database when its blocks need them."""
    import tempfile
    from contextlib import ExitStack

    from tests.support.db import fresh_postgres_database
    from tests.support.llm_server import LLMServer

    needs = {b.needs for b in page_blocks}
    with tempfile.TemporaryDirectory() as root, ExitStack() as stack:
        pg_url = stack.enter_context(fresh_postgres_database()) if "postgres" in needs else None
        llm = None
        if "llm" in needs:
            from tests.docs.test_examples import _answer

            llm = stack.enter_context(LLMServer(responder=_answer)).url.removeprefix("http://")
        return run_page(page_blocks, Path(root), pg_url=pg_url, llm_address=llm)


def main(argv: list[str]) -> None:
    """`python -m tests.docs.consoledoc [--update | --rows] PAGE…`: run pages' examples and
    print what each command prints now; --update writes it into the page where it differs,
    and the rows of `test: rows FILE` blocks as FILE now has them; --rows only the rows,
    running nothing (`make bench` does that after its run)."""

    if argv[:1] == ["--rows"]:
        for page in argv[1:]:
            changed = update_rows(Path(page), blocks(Path(page), page), ROOT)
            if changed:
                print(f"{page}: {changed} table rows rewritten from their files")
        return
    write = argv[:1] == ["--update"]
    for page in argv[1:] if write else argv:
        page_blocks = blocks(Path(page), page)
        outcome = _run_standalone(page_blocks)
        if write:
            print(f"{page}: {update(Path(page), outcome, page_blocks)} outputs rewritten, "
                  f"{update_rows(Path(page), page_blocks, ROOT)} table rows")
            continue
        for block in page_blocks:
            print(f"--- {block.id}")
            for command in block.commands:
                print(f"$ {command.text}\n{outcome.outputs.get(command.line, '(not run)')}",
                      end="")


if __name__ == "__main__":
    main(sys.argv[1:])
