"""The lab: simulated nodes on the controller (see README.md in this folder)."""
