"""Backend-neutral protocols of the store: what a tables, vectors or graph backend must offer."""
