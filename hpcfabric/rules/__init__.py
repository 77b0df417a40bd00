"""Flow rules: addressing, routing, compaction and the compiler (pure FlowSpec values)."""
