"""Reading a form body with readable errors (the API's uploads and the console's forms)."""

from __future__ import annotations

from typing import Any

from python_multipart.multipart import DEFAULT_MAX_HEADER_SIZE
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

from proxy.core.errors import BadRequest
from proxy.parsing.files import NAME_MAX


async def read_form(request: Request, **limits: Any) -> FormData:
    """``request.form`` with its one vague error made readable (``_header_too_long``)."""
    try:
        return await request.form(**limits)
    except HTTPException as exc:
        readable = _header_too_long(exc)
        if readable is None:
            raise
        raise readable from None


def _header_too_long(exc: HTTPException) -> BadRequest | None:
    """Starlette's "Invalid multipart data." hides python-multipart's reason two exceptions down;
    the usual one is a file name too long for a part's header line: said so, with the limit."""
    cause = getattr(exc.__context__, "__cause__", None)
    if cause is None or "header size" not in str(cause):
        return None
    return BadRequest(f"a part's header line is over the limit of {DEFAULT_MAX_HEADER_SIZE} bytes: the file name "
                      f"is too long (send a shorter one; stored names are cut to {NAME_MAX} characters anyway)")
