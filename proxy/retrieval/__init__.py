"""Retrieval: keywords, vector and graph search, selection, and the token-budgeted context."""
