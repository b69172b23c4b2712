"""GraphGate: an Ollama-compatible chat gateway that grounds chats in your documents."""

from .app import create_app
from .settings import Settings

__all__ = ["Settings", "create_app"]
