"""`unflatten_safe` and its decision table (see README.md)."""
