"""`kanban mcp`: the board as an MCP server, a face like the CLI and the web board."""
