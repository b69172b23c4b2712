"""GraphGate: an Ollama-compatible chat gateway that grounds chats in your documents."""

from __future__ import annotations

from typing import Any

from .settings import Settings

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    # imported on first use: the app pulls in the console (admin/), which itself imports proxy
    # modules, so an eager import here would make "import admin.<module>" first a circular import
    if name == "create_app":
        from .app import create_app
        return create_app
    raise AttributeError(name)
