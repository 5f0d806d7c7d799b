"""The profiler: where a program's typecheck time goes (see README.md)."""
