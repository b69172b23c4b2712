"""GraphGate's exception tree. Every error carries the HTTP status it answers with.

    GraphGateError (500)
    ├── BadRequest (400)
    │   ├── MissingBody            "missing request body"
    │   ├── InvalidJSON            the JSON parser's message
    │   └── MissingField           "model is required", ...
    ├── Unauthorized (401)
    ├── Forbidden (403)
    ├── NotFound (404)
    ├── MethodNotAllowed (405)
    ├── Conflict (409)
    │   └── EmbeddingModelMismatch  vectors of another embedding model than the table's
    ├── PayloadTooLarge (413)
    ├── UnsupportedMedia (415)
    ├── ServiceUnavailable (503)
    │   ├── StorageError           the knowledge store could not write (507 when the disk is full)
    │   └── StoreUnavailable       the knowledge store could not be opened
    └── UpstreamError (502)        raised only by proxy.upstream.client, which translates httpx errors
        ├── UpstreamUnavailable (502)
        ├── UpstreamProtocolError (502)
        │   └── UpstreamShapeError  JSON of the wrong shape for GraphGate's own call (not retried)
        ├── UpstreamStatusError (the upstream's own status)
        └── UpstreamTimeout (504)

``proxy.core.responses.error_response`` renders any of them in the shape the path's clients expect.
"""

from __future__ import annotations


class GraphGateError(Exception):
    status = 500

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class BadRequest(GraphGateError):
    status = 400


class MissingBody(BadRequest):
    def __init__(self) -> None:
        super().__init__("missing request body")


class InvalidJSON(BadRequest):
    pass


class MissingField(BadRequest):
    pass


class Unauthorized(GraphGateError):
    status = 401


class Forbidden(GraphGateError):
    status = 403


class NotFound(GraphGateError):
    status = 404


class MethodNotAllowed(GraphGateError):
    status = 405


class Conflict(GraphGateError):
    status = 409


class EmbeddingModelMismatch(Conflict):
    """A commit would add vectors of one embedding model to a table whose vectors come from
    another (GRAPHGATE_EMBED_MODEL changed without `graphgate reindex`): refused, nothing written."""


class PayloadTooLarge(GraphGateError):
    status = 413


class UnsupportedMedia(GraphGateError):
    status = 415


class ServiceUnavailable(GraphGateError):
    status = 503


class StorageError(ServiceUnavailable):
    """DuckDB could not write: raised only by proxy.store.duckdb.connection, which translates its errors."""


class StoreUnavailable(ServiceUnavailable):
    """The knowledge store could not be opened (a read-only or full disk, another process holding
    it); the message names the engine's own error."""


class UpstreamError(GraphGateError):
    status = 502


class UpstreamUnavailable(UpstreamError):
    pass


class UpstreamProtocolError(UpstreamError):
    pass


class UpstreamShapeError(UpstreamProtocolError):
    """The upstream answered GraphGate's own call with valid JSON of the wrong shape (a list, a
    field of the wrong type): not Ollama as GraphGate knows it, so not worth a retry."""


class UpstreamStatusError(UpstreamError):
    """The upstream answered an internal call (extraction, embedding...) with an error status."""


class UpstreamTimeout(UpstreamError):
    status = 504


def first_error(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups from task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if isinstance(e, GraphGateError)), exc.exceptions[0])
    return exc
