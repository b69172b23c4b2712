"""LightRAG's retrieval modes. Which channels each mode runs is declared with the channels
(``proxy/retrieval/channels/__init__.py``); ``bypass`` runs none and injects nothing."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    LOCAL = "local"      # low-level keywords -> entities and their edges
    GLOBAL = "global"    # high-level keywords -> relations and their endpoints
    HYBRID = "hybrid"    # local and global
    MIX = "mix"          # hybrid plus the question against the chunks (the default)
    NAIVE = "naive"      # the question against the chunks only
    BYPASS = "bypass"    # no retrieval


MODES: tuple[str, ...] = tuple(mode.value for mode in Mode)
