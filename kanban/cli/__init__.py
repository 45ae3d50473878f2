"""The `kanban` command line: Typer commands over the board library, Rich views."""
