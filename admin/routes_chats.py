"""Console pages: chats (being written)."""

ROUTES: list = []
