"""Seeding a Hermes kanban board (hermes-agent) for the side-by-side `list` row.

One task is made through `hermes kanban create`, so the schema is Hermes' own; the rest
are copies of its row with their own ids, titles, states and creation times.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

from bench.common import status_of

HERMES_STATES = {"failed": "blocked", "cancelled": "done"}  # no such states in Hermes


def seed_hermes(hermes: str, home: Path, cards: int) -> Path:
    """A HERMES_HOME holding a kanban board of `cards` tasks; returns its database."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HERMES_HOME": str(home)}
    for args in (["kanban", "init"], ["kanban", "create", "seed task", "--body", "seed"]):
        subprocess.run([hermes, *args], env=env, check=True, capture_output=True, timeout=120)
    db = home / "kanban.db"
    conn = sqlite3.connect(db)
    try:
        with conn:
            (created,) = conn.execute("SELECT created_at FROM tasks").fetchone()
            conn.executemany(
                "INSERT INTO tasks (id, title, body, status, priority, created_by, created_at) "
                "VALUES (?, ?, ?, ?, 0, 'user', ?)",
                ((f"t_{i:08x}", f"card {i}: a task with a title of ordinary length",
                  "the goal", HERMES_STATES.get(status_of(i), status_of(i)), created + i)
                 for i in range(1, cards)))
    finally:
        conn.close()
    return db
