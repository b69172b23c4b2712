"""The upstream Ollama: the one HTTP boundary, GraphGate's own model calls, the watcher."""
