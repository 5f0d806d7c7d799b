"""What we read of other libraries, by version (see README.md)."""
