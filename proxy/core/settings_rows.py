"""The settings as people are shown them (the console's settings page, ``graphgate settings``): every
setting of the table (proxy/core/settings.py) with its value as it may be shown and where it came
from, truthfully.

- A secret is never shown: "(set, hidden)" when it is set, "(not set)" when it is not; a secret
  that is a URL (a PostgreSQL store) shows its address with the password masked. A secret at its
  default is no secret (``GRAPHGATE_STORE``'s ``embedded``): it is shown as it is.
- The source is where the value came from; a value that differs from the default while nothing
  says where it came from was given by the program that built the settings (an embedding
  application, a test), and is said to be.
- A list is joined with ", " so that the page can wrap it.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from proxy.core.settings import SETTINGS, Setting, Settings

SOURCES = {"default": "default", "env": "environment", "cli": "command line",
           "program": "the program that started GraphGate"}
MASK = "•••"


def _default(name: str) -> Any:
    field = Settings.__dataclass_fields__[name]
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _masked_url(value: str) -> str | None:
    """``value`` with its password masked, when it is a URL that has one; None otherwise."""
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc or not password:
        return None
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:{MASK}@{host}", parts.path, parts.query, parts.fragment))


def shown(setting: Setting, value: Any, at_default: bool) -> str:
    if value is None or value == "" or value == ():
        return "(not set)"
    if setting.secret and not at_default:
        masked = _masked_url(value) if isinstance(value, str) else None
        return masked or "(set, hidden)"
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return str(value)


def settings_rows(settings: Settings) -> list[tuple[Setting, str, str]]:
    """(setting, value as shown, source in words), in the table's order."""
    rows = []
    for setting in SETTINGS:
        value = getattr(settings, setting.name)
        at_default = value == _default(setting.name)
        source = settings.sources.get(setting.name, "default")
        if source == "default" and not at_default:
            source = "program"
        rows.append((setting, shown(setting, value, at_default), SOURCES.get(source, source)))
    return rows
