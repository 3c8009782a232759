"""Node-side validation suite: probes -> checks -> judge (see README.md)."""
