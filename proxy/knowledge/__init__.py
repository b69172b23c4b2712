"""The knowledge service: the one thing the API, the console, the CLI and chat talk to."""
