"""A path sent to the upstream stays under the upstream's URL (issue 29, item 3).

The gateway forwards the client's path as it was sent (``/v1/models/{model:path}``,
``/api/blobs/{digest}``), joined to ``GRAPHGATE_UPSTREAM``, which may have a path of its own
(``http://host/ollama``). A ``..`` segment would take the request above it: httpx resolves a literal
one when it builds the URL, and the upstream (or a proxy in front of it) resolves an escaped one
(``%2e%2e``, ``..%2f``, ``..\\``) once it has decoded the path. No Ollama path has a ``.`` or ``..``
segment, so any is refused, however it is spelt, for every request (the client's and GraphGate's own).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

import httpx

from proxy.core.errors import BadRequest

_SEPARATORS = re.compile(r"[/\\]")   # a backslash too: some servers read it as a slash
_DECODINGS = 3   # an escape of an escape ("%252e") is decoded twice by a proxy that decodes once more


def check_path(path: str) -> None:
    """400 for a path that could leave the upstream's base path, or that is not a path at all."""
    if not path.startswith("/") or "#" in path or "?" in path:
        raise BadRequest(f"cannot forward {path[:200]!r}: not an absolute path")
    text = path
    for _ in range(_DECODINGS):
        if any(segment in (".", "..") for segment in _SEPARATORS.split(text)):
            raise BadRequest(f"cannot forward {path[:200]!r}: a path may not have '.' or '..' segments "
                             "(nor escaped ones, such as %2e%2e)")
        decoded = unquote(text, errors="surrogateescape")
        if decoded == text:
            return
        text = decoded
    raise BadRequest(f"cannot forward {path[:200]!r}: too many levels of percent-escapes")


def within(base: httpx.URL, url: httpx.URL) -> bool:
    """Whether ``url`` is on ``base``'s server, at or under ``base``'s path."""
    if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
        return False
    prefix = base.raw_path.rstrip(b"/")
    return not prefix or url.raw_path == prefix or url.raw_path.startswith(prefix + b"/")
