"""Reaching a node: SSH (paramiko), the validation bundle, the session that ships it,
runs the suite and fetches within caps; the controller's shape of a node result."""
