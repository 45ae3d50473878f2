"""The web board: `kanban web` (Starlette on uvicorn), imported only by that command."""
