"""Simulated daemons (standard library only), run by the packages' systemd units."""
