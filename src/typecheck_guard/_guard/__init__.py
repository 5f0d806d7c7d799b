"""The runtime guard: typechecks seen at dispatch time (see README.md)."""
