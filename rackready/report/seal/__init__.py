"""Canonical bytes, hashes and Ed25519 signatures of the reports."""
