"""GraphGate: an Ollama-compatible chat gateway that grounds chats in your documents.

The composition root is ``proxy.app`` (``create_app``); docs/architecture.md walks the folders.
"""
