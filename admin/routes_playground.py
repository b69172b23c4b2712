"""Console pages: playground (being written)."""

ROUTES: list = []
