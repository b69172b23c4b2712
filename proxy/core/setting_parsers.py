"""Parsers for setting values: each takes the raw string and returns the typed value or raises
ValueError (``Settings.load`` turns that into a message naming the variable)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit


def parse_url(raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("expected an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError:
        raise ValueError("the URL's port must be a number between 0 and 65535") from None
    return raw.strip().rstrip("/")


def parse_url_list(raw: str) -> str:
    """One http(s) URL, or several separated by commas (GRAPHGATE_UPSTREAM): each checked, kept
    as one comma-separated string (``url_list`` splits it), duplicates dropped."""
    urls = [parse_url(part) for part in raw.split(",") if part.strip()]
    if not urls:
        raise ValueError("expected an http:// or https:// URL")
    return ",".join(dict.fromkeys(urls))


def url_list(value: str) -> tuple[str, ...]:
    """The URLs of a ``parse_url_list`` value, in their order."""
    return tuple(value.split(","))


def parse_optional_url(raw: str) -> str | None:
    """An http(s) URL, or None when unset (a feature left off)."""
    return parse_url(raw) if raw.strip() else None


def parse_port(raw: str) -> int:
    port = int(raw)
    if not 0 <= port <= 65535:
        raise ValueError("expected a port number between 0 and 65535")
    return port


def parse_positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("expected a number greater than 0")
    return value


def parse_positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
               "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def parse_size(raw: str) -> int:
    """Bytes, optionally with a unit: 1048576, 512KiB, 50MB, 1GiB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", raw)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError("expected a size such as 1048576, 512KiB, 50MB or 1GiB")
    size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
    if size < 1:
        raise ValueError("expected a size of at least 1 byte")
    return size


def parse_origins(raw: str) -> tuple[str, ...]:
    origins = tuple(o.strip() for o in raw.split(",") if o.strip())
    for origin in origins:
        if origin != "*" and "://" not in origin:
            raise ValueError(f"origin {origin!r} needs a scheme, e.g. http://localhost:3000")
    return origins


_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def parse_log_level(raw: str) -> str:
    level = raw.strip().lower()
    if level not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}")
    return level


def parse_optional_str(raw: str) -> str | None:
    return raw if raw.strip() else None


def parse_optional_path(raw: str) -> Path | None:
    return Path(raw).expanduser() if raw.strip() else None


def parse_names(raw: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    if not names:
        raise ValueError("expected a comma-separated list with at least one name")
    return names


def int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if not low <= value <= high:
            raise ValueError(f"expected a whole number from {low} to {high}")
        return value
    return parse


def choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return value
    return parse


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def parse_fraction(raw: str) -> float:
    value = float(raw)
    if not 0 <= value <= 1:
        raise ValueError("expected a number from 0 to 1")
    return value


def parse_db_memory(raw: str) -> str:
    if not re.fullmatch(r"\s*\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB|%)\s*", raw, re.IGNORECASE):
        raise ValueError("expected an amount such as 512MB, 2GB or 25%")
    return raw.strip()


def parse_store(raw: str) -> str:
    """``embedded``, or a PostgreSQL connection URI."""
    value = raw.strip()
    if value == "embedded" or re.match(r"postgres(ql)?://", value):
        return value
    raise ValueError("expected embedded or a URI such as postgresql://user:password@host:5432/graphgate")


def parse_path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("expected a directory path")
    return Path(raw).expanduser()


# Ollama's own default OLLAMA_ORIGINS: local pages on any port plus app and extension schemes.


def parse_plain_model_kb(raw: str) -> str:
    """A knowledge base's name (as proxy/knowledge/bases.py accepts them), or ``none``."""
    value = raw.strip()
    if not re.fullmatch(r"[a-z0-9_-]{1,64}", value):
        raise ValueError("expected a knowledge base's name (lowercase letters, digits, '-', '_') or none")
    return value
