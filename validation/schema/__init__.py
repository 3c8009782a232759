"""The JSON Schema of result.json (a package so an installed wheel carries the file)."""
