"""What the templates show, derived from a report document (pure functions, no rendering)."""
