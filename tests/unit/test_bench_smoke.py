"""Every benchmark in bench/ still runs and returns well-formed rows (tiny sizes; not speed)."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, run_all
from bench.common import SMOKE, percentile
from bench.report import Goal, Row, render_results, render_table

# Rough sequential smoke times, to start the long ones first.
SMOKE_SECONDS = {"postgres": 40, "recovery": 8, "latency": 6, "web": 6, "memory": 5,
                 "throughput": 5, "daily": 4, "resume": 4, "cli": 3, "claims": 2,
                 "scale": 2, "tools": 1}


@pytest.fixture(scope="module")
def smoke_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Row]]:
    work = tmp_path_factory.mktemp("bench")

    def one(name: str) -> list[Row]:
        return run_all(SMOKE, work, only=[name])

    # The numbers do not matter here, so the benchmarks share the cores, longest first.
    names = sorted(BENCHMARKS, key=lambda name: -SMOKE_SECONDS.get(name, 0))
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_benchmark_returns_well_formed_rows(smoke_rows: dict[str, list[Row]], name: str) -> None:
    rows = smoke_rows[name]
    if name == "postgres" and not rows:  # no server (or packages): rows left out
        from tests.support.pg import skip_or_fail

        skip_or_fail("the PostgreSQL bench rows need a server on 127.0.0.1:5432")
    assert rows, f"{name} returned no rows"
    for row in rows:
        assert "FAILED" not in row.metric, row.note
        assert row.key and row.metric and row.baseline_label
        assert row.value is not None and math.isfinite(row.value) and row.value >= 0
        assert row.baseline is not None and math.isfinite(row.baseline) and row.baseline >= 0
        assert row.ratio is None or math.isfinite(row.ratio)
        assert row.met in (True, False, None)
        assert len(row.cells()) == 7


def test_no_double_claims_even_in_smoke(smoke_rows: dict[str, list[Row]]) -> None:
    doubles = [r for r in smoke_rows["claims"] if r.metric.startswith("double claims")]
    assert [r.value for r in doubles] == [0.0]


def test_row_keys_are_unique(smoke_rows: dict[str, list[Row]]) -> None:
    keys = [r.key for rows in smoke_rows.values() for r in rows]
    assert len(keys) == len(set(keys))


def test_results_render_with_the_machine(smoke_rows: dict[str, list[Row]]) -> None:
    rows = [r for rows in smoke_rows.values() for r in rows]
    text = render_results(rows, {"cpu": "test cpu", "cores": "2"}, mode="smoke", seconds=1)
    assert "- cpu: test cpu" in text
    assert render_table(rows) in text


def test_goals_and_ratios() -> None:
    row = Row("9.1", "m", "ms", 30.0, 60.0, "base", Goal("value", "<=", 50, "ms"))
    assert row.ratio == 0.5 and row.met is True and str(row.goal) == "≤ 50 ms"
    assert Row("9.2", "m", "", 1.0, 2.0, "b", Goal("ratio", ">=", 2)).met is False
    assert Row("9.3", "m", "", None, 2.0, "b", Goal("ratio", ">=", 2)).met is None
    added = Row("9.4", "m", "ms", 6.0, 2.0, "b", Goal("added", "<=", 5, "ms"))
    assert added.met is True and str(added.goal) == "≤ +5 ms over the baseline"
    assert Row("9.4", "m", "ms", 8.0, 2.0, "b", Goal("added", "<=", 5, "ms")).met is False
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_results_file_is_next_to_the_package() -> None:
    from bench.__main__ import RESULTS

    assert Path(__file__).resolve().parents[2] / "bench" / "results.md" == RESULTS
