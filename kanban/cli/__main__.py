"""`python -m kanban.cli`."""

from kanban.cli.entry import main

main()
