"""kanban package."""
