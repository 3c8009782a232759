"""The run store: the only reader and writer of a run directory."""
