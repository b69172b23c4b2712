"""GraphGate's settings: one declared table, read once at start-up.

Each row of ``SETTINGS`` names a setting, its environment variable, its default, a parser
and a line of help. ``Settings.load()`` reads the environment, lets command-line values
override it and fails with a ``SettingsError`` naming the variable and the bad value.
README.md documents every row (``tests/test_settings.py`` checks that it does).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class SettingsError(ValueError):
    """A setting has a value GraphGate cannot use; the message names the variable."""


# --- parsers: each takes the raw string and returns the typed value or raises ValueError ---


def parse_url(raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("expected an http:// or https:// URL")
    return raw.strip().rstrip("/")


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


def parse_path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("expected a directory path")
    return Path(raw).expanduser()


# Ollama's own default OLLAMA_ORIGINS: local pages on any port plus app and extension schemes.
DEFAULT_ORIGINS = ",".join(
    f"{scheme}://{host}{port}"
    for host in ("localhost", "127.0.0.1", "0.0.0.0")
    for scheme in ("http", "https")
    for port in ("", ":*")
) + ",app://*,file://*,tauri://*,vscode-webview://*,chrome-extension://*,moz-extension://*,safari-web-extension://*"


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    parse: Callable[[str], Any]
    help: str
    secret: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SETTINGS: tuple[Setting, ...] = (
    Setting("upstream", "GRAPHGATE_UPSTREAM", "http://127.0.0.1:11434", parse_url,
            "URL of the upstream Ollama server that GraphGate forwards to."),
    Setting("host", "GRAPHGATE_HOST", "127.0.0.1", str,
            "Address to listen on. Binding elsewhere than loopback without a key or password logs a warning."),
    Setting("port", "GRAPHGATE_PORT", "11435", parse_port, "TCP port to listen on."),
    Setting("data_dir", "GRAPHGATE_DATA_DIR", "./graphgate-data", parse_path,
            "Directory holding the knowledge store (DuckDB database, vector indexes)."),
    Setting("api_key", "GRAPHGATE_API_KEY", "", parse_optional_str,
            "When set, every /api/* and /v1/* request needs `Authorization: Bearer <key>`.", secret=True),
    Setting("max_body_bytes", "GRAPHGATE_MAX_BODY_BYTES", "64MiB", parse_size,
            "Largest request body accepted on JSON endpoints (blob uploads are streamed and exempt)."),
    Setting("connect_timeout", "GRAPHGATE_CONNECT_TIMEOUT", "10", parse_positive_float,
            "Seconds to wait for a connection to the upstream."),
    Setting("read_timeout", "GRAPHGATE_READ_TIMEOUT", "600", parse_positive_float,
            "Seconds the upstream may stay silent before a request fails with 504 (between bytes; "
            "streams have no total time limit, so long answers are never cut)."),
    Setting("discovery_timeout", "GRAPHGATE_DISCOVERY_TIMEOUT", "5", parse_positive_float,
            "Seconds allowed for /api/version, /api/tags, /api/ps and /api/show; on timeout /api/tags "
            "answers from its last good copy."),
    Setting("cors_origins", "GRAPHGATE_CORS_ORIGINS", DEFAULT_ORIGINS, parse_origins,
            "Comma-separated browser origins allowed to call the API (`*` wildcards allowed, `*` alone "
            "allows all). The default is Ollama's: localhost pages on any port and app/extension schemes."),
    Setting("log_level", "GRAPHGATE_LOG_LEVEL", "info", parse_log_level,
            "Logging level: debug, info, warning, error or critical."),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def _parse(setting: Setting, raw: str, source: str) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        where = setting.flag if source == "cli" else setting.env
        raise SettingsError(f"{where}: invalid value {raw!r}: {exc}") from None


@dataclass(frozen=True)
class Settings:
    upstream: str = "http://127.0.0.1:11434"
    host: str = "127.0.0.1"
    port: int = 11435
    data_dir: Path = Path("./graphgate-data")
    api_key: str | None = None
    max_body_bytes: int = 64 * 1024**2
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    discovery_timeout: float = 5.0
    cors_origins: tuple[str, ...] = field(default_factory=lambda: parse_origins(DEFAULT_ORIGINS))
    log_level: str = "info"
    # where each value came from: "default", "env" or "cli" (shown by the console)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None,
             overrides: Mapping[str, str | None] | None = None) -> Settings:
        """Defaults, then the environment, then command-line ``overrides`` (raw strings)."""
        environ = os.environ if environ is None else environ
        overrides = overrides or {}
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for setting in SETTINGS:
            raw, source = setting.default, "default"
            if setting.env in environ:
                raw, source = environ[setting.env], "env"
            if overrides.get(setting.name) is not None:
                raw, source = str(overrides[setting.name]), "cli"
            values[setting.name] = _parse(setting, raw, source)
            sources[setting.name] = source
        return cls(**values, sources=sources)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def describe(self) -> list[tuple[Setting, str, str]]:
        """(setting, displayed value, source) rows with secrets masked."""
        rows = []
        for setting in SETTINGS:
            value = getattr(self, setting.name)
            if setting.secret:
                shown = "(set, hidden)" if value else "(not set)"
            elif isinstance(value, tuple):
                shown = ",".join(value)
            else:
                shown = str(value)
            rows.append((setting, shown, self.sources.get(setting.name, "default")))
        return rows

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def settings_markdown() -> str:
    """The settings reference table for README.md (``graphgate settings --markdown``)."""
    lines = ["| Variable | Flag | Default | Meaning |", "|---|---|---|---|"]
    for setting in SETTINGS:
        default = f"`{setting.default}`" if setting.default else "(unset)"
        if setting is SETTINGS_BY_NAME["cors_origins"]:
            default = "Ollama's defaults"
        meaning = setting.help.replace("|", "\\|")
        lines.append(f"| `{setting.env}` | `{setting.flag}` | {default} | {meaning} |")
    return "\n".join(lines) + "\n"
