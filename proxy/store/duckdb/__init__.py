"""The embedded tables backend: DuckDB. All SQL lives in this folder."""
