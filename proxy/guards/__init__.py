"""Guards in front of every route: the Host check, CORS, the API key and console sessions, body bounds."""
