"""incremental."""
