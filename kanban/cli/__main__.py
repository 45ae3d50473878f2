"""`python -m kanban.cli`."""

from kanban.cli.app import main

main()
