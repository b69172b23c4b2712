"""Console pages: documents (being written)."""

ROUTES: list = []
