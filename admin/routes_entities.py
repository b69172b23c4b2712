"""Console pages: entities (being written)."""

ROUTES: list = []
