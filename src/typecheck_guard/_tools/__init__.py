"""The `typecheck-guard` command line (see README.md)."""
