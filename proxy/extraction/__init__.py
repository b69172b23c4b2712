"""Entity and relation extraction: prompts, the per-chunk calls, reading the replies."""
