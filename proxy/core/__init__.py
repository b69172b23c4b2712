"""The shared kernel: errors, settings, the tokenizer, limits, Host names, retrieval modes, request and error shapes."""
