"""Guards in front of every route: the Host check, CORS and the API key, body bounds."""
