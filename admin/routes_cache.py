"""Console pages: cache (being written)."""

ROUTES: list = []
