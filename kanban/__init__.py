"""kanban: a SQLite-backed kanban board whose cards are worked by agents."""

__version__ = "0.1.0"
