"""Read plans: a read model written once, run by the sync store and by the async one.

A plan is a generator that yields `Query` objects (SQL with `:name` parameters) and is
sent each query's `Rows`; what it returns is the read model. `run_plan` drives it on a
sync `Conn`; `kanban.state.aio` drives the same generator on an async connection, so the
command line and the web board share every query and every row-shaping step.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kanban.state.store import Conn

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Query:
    """One read statement of a plan."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


class Rows(list[tuple[Any, ...]]):
    """A query's rows (tuples) with the column names the driver reported."""

    columns: tuple[str, ...] = ()

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> Rows:
        out = cls(tuple(row) for row in rows)
        out.columns = tuple(columns)
        return out

    def maps(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self]

    def scalar(self) -> Any:
        return self[0][0] if self else None

    def column(self) -> list[Any]:
        return [row[0] for row in self]


Plan = Generator[Query, Rows, T]


def column_names(description: Sequence[Sequence[Any]] | None) -> tuple[str, ...]:
    return tuple(d[0] for d in description) if description else ()


def run_plan(conn: Conn, plan: Plan[T]) -> T:
    """Run a plan inside the caller's transaction."""
    try:
        query = next(plan)
        while True:
            cursor = conn.execute(query.sql, query.params)
            query = plan.send(Rows.of(cursor.fetchall(), column_names(cursor.description)))
    except StopIteration as done:
        return done.value


def in_list(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """`:p0, :p1, …` and their parameters, for `IN (…)`."""
    names = [f"{prefix}{n}" for n in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))
