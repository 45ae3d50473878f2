"""The `kanban` command line: click commands over the board library, loaded on first use;
plain text when piped, Rich views on a terminal."""
