"""The `PyTree[...]` verdict cache (see README.md)."""
