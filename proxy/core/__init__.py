"""The shared kernel: errors, settings, the tokenizer, limits, request and error shapes."""
