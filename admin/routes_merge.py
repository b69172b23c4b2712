"""Console pages: merge (being written)."""

ROUTES: list = []
