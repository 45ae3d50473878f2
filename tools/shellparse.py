"""A shell command read as bash reads it (with bashlex): every simple command it would run.

Pipelines, lists, compound commands, function bodies and the commands inside `$(...)`,
backticks and `<(...)` all become `Simple` records, each with its words (quotes removed),
its redirections, the directory a `cd` earlier in the line moved to, and whether its input
comes from a pipe. What the parser cannot read is a reason in `Reading.unknown`.
"""

from __future__ import annotations

import functools
import importlib
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

UNKNOWN_DIR = "?"  # a `cd` to a place known only when the command runs
_BRACES = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")  # brace expansion: {a,b} or {1..9}
_BRACED = re.compile(r"\$\{[^\s;|&<>()'\"`{}]*\}")
_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "lwp-request"})


class Unreadable(Exception):  # noqa: N818 (an answer, not a failure: the command is UNKNOWN)
    """bashlex could not parse the command."""


@dataclass(frozen=True)
class Word:
    text: str  # quotes removed; expansions left as written ($HOME, $(...))
    dynamic: bool = False  # its value is only known when the command runs
    fetches: bool = False  # a substitution in it runs a downloader (curl, wget)


@dataclass(frozen=True)
class Redirect:
    op: str  # '>', '>>', '>|', '&>', '<', '<<', '<<<', '<>', '>&'...
    target: Word | None  # None for a descriptor duplication (2>&1)
    body: str | None = None  # a here-document's or here-string's text

    @property
    def writes(self) -> bool:
        return self.target is not None and ">" in self.op and self.op != ">&"


@dataclass(frozen=True)
class Simple:
    assignments: tuple[Word, ...]
    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...]
    cwd: str = "."  # "." the workspace; relative to it, absolute, "~..." or UNKNOWN_DIR
    piped: bool = False  # its standard input is the output of the commands before it
    upstream: frozenset[str] = frozenset()  # programs earlier in its pipeline


@dataclass
class Reading:
    commands: list[Simple] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    fork_bomb: bool = False


def read(command: str, cwd: str = ".") -> Reading:
    """Every simple command in `command`; Unreadable when bashlex cannot parse it."""
    command = readable(command)
    if any(not _BRACED.match(command, m.start()) for m in re.finditer(r"\$\{", command)):
        # bashlex 0.18 loops forever on a `${` whose `}` is not in the same word
        raise Unreadable("a ${...} this reader cannot follow (spaces or quotes inside)")
    walker = _Walker(command, cwd)
    try:
        for tree in bashlex().parse(command):
            walker.node(tree)
    except Exception as exc:  # noqa: BLE001 (a parser on hostile text: any failure is UNKNOWN)
        raise Unreadable(_first_line(str(exc)) or type(exc).__name__) from None
    return walker.reading


@functools.cache
def bashlex() -> Any:
    """The parser, imported on first use: building its grammar tables takes half a second,
    which only workers that run commands pay (a forkserver preloads it for its workers)."""
    return importlib.import_module("bashlex")


def readable(command: str) -> str:
    """`command` with what bashlex does not implement but cannot hide a command rewritten:
    `$((...))` holding only an expression becomes a parameter, `[[ ... ]]` becomes
    `[ ... ]` (its words are still read), a leading `time` keyword goes."""
    out, i = [], 0
    while (start := command.find("$((", i)) != -1:
        end = _arith_end(command, start + 3)
        inner = command[start + 3:end - 2] if end != -1 else ""
        if end == -1 or any(c in inner for c in ("$(", "`", ";", "\n", "&&", "||")):
            break
        out.append(command[i:start] + "$KANBAN_ARITHMETIC")
        i = end
    command = "".join(out) + command[i:]
    command = _TEST_BRACKETS.sub(lambda m: m.group(1) + m.group(2)[0], command)
    return _TIME.sub(lambda m: m.group(1), command)


_TEST_BRACKETS = re.compile(r"(^|\s|;|&|\||\(|!)(\[\[|\]\])(?=\s|;|&|\||\)|$)", re.MULTILINE)
_TIME = re.compile(r"(^|[;&|(]\s*|\b(?:then|do|else)\s+)time(?:\s+-p)?\s+", re.MULTILINE)


def _arith_end(text: str, i: int) -> int:
    """The index after the `))` closing an arithmetic expansion whose body starts at i."""
    depth = 0
    while i < len(text):
        char = text[i]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return i + 2 if text.startswith("))", i) else -1
            depth -= 1
        i += 1
    return -1


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:120]


class _Walker:
    def __init__(self, source: str, cwd: str) -> None:
        self.source = source
        self.cwd = cwd
        self.reading = Reading()

    def node(self, node: Any, *, piped: bool = False,
             upstream: frozenset[str] = frozenset()) -> None:
        kind = node.kind
        if kind == "command":
            self.command(node, piped=piped, upstream=upstream)
        elif kind == "pipeline":
            self.pipeline(node)
        elif kind == "list":
            for part in node.parts:
                self.node(part)
        elif kind == "compound":
            self.compound(node, piped=piped, upstream=upstream)
        elif kind == "function":
            self.function(node)
        elif kind in ("if", "for", "while", "until"):
            for part in node.parts:
                if part.kind not in ("reservedword", "word"):
                    self.node(part)
                elif part.kind == "word":
                    self.word(part)
        elif kind in ("operator", "pipe", "reservedword"):
            return
        elif kind in ("word", "assignment"):
            self.word(node)
        else:
            self.reading.unknown.append(f"a shell construct this reader does not know ({kind})")

    def pipeline(self, node: Any) -> None:
        seen: set[str] = set()
        first = True
        for part in node.parts:
            if part.kind in ("pipe", "reservedword"):
                continue
            self.node(part, piped=not first, upstream=frozenset(seen))
            seen |= _programs(part)
            first = False

    def compound(self, node: Any, *, piped: bool, upstream: frozenset[str]) -> None:
        subshell = bool(node.list) and getattr(node.list[0], "word", None) == "("
        saved = self.cwd
        for part in node.list:
            self.node(part, piped=piped, upstream=upstream)
        for redirect in getattr(node, "redirects", None) or ():
            self.redirect(redirect)
        if subshell:  # a `cd` inside ( ... ) ends with it
            self.cwd = saved

    def function(self, node: Any) -> None:
        name = node.parts[0].word
        for part in node.parts[1:]:
            if part.kind != "compound":
                continue
            piped, background = _multiplying(part)
            if name in piped or (background and name in _programs(part)):
                self.reading.fork_bomb = True
            self.node(part)  # a definition runs nothing, but what it would run is read anyway

    def command(self, node: Any, *, piped: bool, upstream: frozenset[str]) -> None:
        assignments: list[Word] = []
        words: list[Word] = []
        redirects: list[Redirect] = []
        for part in node.parts:
            if part.kind == "assignment":
                assignments.append(self.word(part))
            elif part.kind == "word":
                words.append(self.word(part))
            elif part.kind == "redirect":
                redirects.append(self.redirect(part))
        self.reading.commands.append(Simple(tuple(assignments), tuple(words), tuple(redirects),
                                            self.cwd, piped, upstream))
        if words and words[0].text in ("cd", "pushd") and not words[0].dynamic:
            self.cwd = change_dir(self.cwd, words[1:])

    def word(self, node: Any) -> Word:
        """The word, after walking the commands its substitutions run."""
        dynamic = fetches = False
        for part in getattr(node, "parts", None) or ():
            if part.kind in ("commandsubstitution", "processsubstitution"):
                dynamic = True
                fetches = fetches or bool(_programs(part.command) & _DOWNLOADERS)
                inner = _Walker(self.source, self.cwd)
                inner.node(part.command)
                self.merge(inner.reading)
            elif part.kind == "parameter":
                dynamic = True
        written = self.source[node.pos[0]:node.pos[1]]
        if _BRACES.search(written) or "$'" in written:
            dynamic = True
        return Word(node.word, dynamic, fetches)

    def redirect(self, node: Any) -> Redirect:
        heredoc = getattr(node, "heredoc", None)
        body = heredoc.value if heredoc is not None else None
        if body is not None:
            body = body.rsplit("\n", 1)[0] if "\n" in body else ""  # the end marker's line
        output = node.output
        target = self.word(output) if getattr(output, "kind", None) == "word" else None
        if node.type == "<<<" and target is not None:
            body = target.text
        return Redirect(node.type, target, body)

    def merge(self, other: Reading) -> None:
        self.reading.commands += other.commands
        self.reading.unknown += other.unknown
        self.reading.fork_bomb = self.reading.fork_bomb or other.fork_bomb


def change_dir(cwd: str, args: Iterable[Word]) -> str:
    """Where `cd ARGS` run in `cwd` goes."""
    operands = [a for a in args if not a.text.startswith("-") or a.text == "-"]
    if not operands:
        return "~"
    target = operands[0]
    if target.dynamic or target.text == "-":
        return home_relative(target.text) or UNKNOWN_DIR
    return join(cwd, target.text)


def home_relative(text: str) -> str | None:
    """`~...` for a path spelled through the home directory, else None."""
    for prefix in ("$HOME", "${HOME}"):
        if text == prefix or text.startswith(prefix + "/"):
            return "~" + text[len(prefix):]
    return text if text == "~" or text.startswith("~") else None


def join(cwd: str, path: str) -> str:
    if cwd == UNKNOWN_DIR and not path.startswith(("/", "~")):
        return UNKNOWN_DIR
    if path.startswith(("/", "~")):
        return posixpath.normpath(path) if path.startswith("/") else path
    return posixpath.normpath(posixpath.join(cwd, path))


def _programs(node: Any) -> set[str]:
    """The first words of every command under `node`."""
    found: set[str] = set()

    visitor: Any = bashlex().ast.nodevisitor

    class Visitor(visitor):
        def visitcommand(self, n: Any, parts: Any) -> None:
            words = [p.word for p in parts if p.kind == "word"]
            if words:
                found.add(posixpath.basename(words[0]))

    Visitor().visit(node)
    return found


def _multiplying(node: Any) -> tuple[set[str], bool]:
    """Programs run inside pipelines under `node`, and whether anything runs in the
    background (a function calling itself that way multiplies: a fork bomb)."""
    piped: set[str] = set()
    background = [False]

    visitor: Any = bashlex().ast.nodevisitor

    class Visitor(visitor):
        def visitpipeline(self, n: Any, parts: Any) -> None:
            for part in parts:
                if part.kind == "command":
                    piped.update(_programs(part))

        def visitoperator(self, n: Any, op: str) -> None:
            background[0] = background[0] or op == "&"

    Visitor().visit(node)
    return piped, background[0]
