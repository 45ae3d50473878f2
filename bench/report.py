"""Rows of the results table, their goals, the machine description and the rendering."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class Goal:
    """A target on the ratio (kanban / baseline) or on kanban's own value."""

    on: str  # "ratio" | "value" | "added" (value minus baseline)
    op: str  # ">=" | "<=" | "=="
    target: float
    unit: str = ""

    def met(self, row: Row) -> bool | None:
        got = row.ratio if self.on == "ratio" else row.value
        if self.on == "added":
            got = None if row.value is None or row.baseline is None else \
                row.value - row.baseline
        if got is None:
            return None
        if self.op == ">=":
            return got >= self.target
        if self.op == "<=":
            return got <= self.target
        return got == self.target

    def __str__(self) -> str:
        sign = {">=": "≥", "<=": "≤", "==": "="}[self.op]
        if self.on == "ratio":
            return f"{sign} {self.target:g}x"
        if self.on == "added":
            return f"{sign} +{self.target:g} {self.unit} over the baseline".replace("  ", " ")
        return f"{sign} {self.target:g}{(' ' + self.unit) if self.unit else ''}"


@dataclass(frozen=True)
class Row:
    """One line of the table: kanban against a baseline measured in the same run."""

    key: str  # e.g. "1.2"
    metric: str
    unit: str
    value: float | None
    baseline: float | None
    baseline_label: str
    goal: Goal | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.goal.met(self)

    def cells(self) -> list[str]:
        met = {True: "yes", False: "no", None: "n/a"}[self.met]
        return [
            self.key, self.metric, _num(self.value, self.unit),
            f"{_num(self.baseline, self.unit)} ({self.baseline_label})",
            "-" if self.ratio is None else f"{self.ratio:.2f}x",
            "-" if self.goal is None else str(self.goal), met,
        ]


HEADERS = ["#", "metric", "kanban", "baseline", "ratio", "goal", "met?"]


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if value == 0 or abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def render_table(rows: list[Row]) -> str:
    """A GitHub-flavoured Markdown table, readable as plain text too."""
    cells = [HEADERS, *[r.cells() for r in rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS))]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(HEADERS), rule, *[line(c) for c in cells[1:]]])


def render_notes(rows: list[Row]) -> str:
    return "\n".join(f"- {r.key}: {r.note}" for r in rows if r.note)


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": _memory(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "kernel": f"{platform.system()} {platform.release()}",
        "code": _code_version(),
        "load average at start": " ".join(f"{x:.2f}" for x in load),
    }


def _code_version() -> str:
    """The commit measured, and whether the tree had uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    changed = len(dirty.splitlines())
    return head.strip() + (f" + {changed} modified files" if changed else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def render_results(rows: list[Row], host: dict[str, str], *, mode: str, seconds: float) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# kanban benchmarks",
        "",
        f"Written by `python -m bench` ({mode} run, {seconds:.0f} s) on {stamp}. "
        "Every row compares kanban with a baseline measured in the same run; "
        "ratio = kanban / baseline. Medians over repeats; latencies as p50/p99 where noted.",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in host.items()],
        "",
        "## Results",
        "",
        render_table(rows),
        "",
        "## Notes",
        "",
        render_notes(rows),
        "",
    ]
    return "\n".join(lines)
