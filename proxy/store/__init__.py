"""The knowledge store: DuckDB tables (the truth), USearch indexes and an igraph graph (derived)."""
