"""state package."""
