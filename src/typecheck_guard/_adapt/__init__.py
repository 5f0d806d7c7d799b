"""How `install()` registers classes (see README.md)."""
